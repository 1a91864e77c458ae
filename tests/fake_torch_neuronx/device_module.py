"""``torch.neuron``, the device module, as far as our code and torchtitan call it.

torch-neuronx keeps one process-wide device state (NeuronDevice.cpp:31-35): before
``init_process_group`` a process sees its visible logical cores as devices 0..n-1;
``_neuron_runtime_setup`` (distributed/backend.py:300-303) then fixes the local world
size and binds the process to ``neuron:LOCAL_RANK``, after which ``device_count()`` is
the local world size (NeuronDevice.cpp:228-236) and only that one index may hold memory
(``get_vnc_id``, NeuronDevice.cpp:189-211, called by the allocator,
NeuronCachingAllocator.cpp:49-50). :data:`STATE` is that state; the process group
(runtime.py) fills it, the CPU fallback's allocator (tensors.py) checks it.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

#: physical NeuronCores per Trainium2 chip (AWS trn2 architecture page)
PHYSICAL_CORES_PER_CHIP = 8

#: the process's device state (NeuronDevice.cpp:31-37): -1 until the process group sets it
STATE: dict[str, int | bool] = {
    "local_world_size": -1,
    "start": -1,  # local_device_start_index: the PyTorch index bound to this process
    "runtime": False,  # nrt_init done (torch_neuronx._lazy_init, __init__.py:137-160)
}

#: a logical core's HBM at LNC 2: 96 GiB per trn2 chip over 4 logical cores
HBM_PER_CHIP = 96 * 2**30


def visible_cores(value: str) -> list[int]:
    """NEURON_RT_VISIBLE_CORES: "3", "8-15" or "0,2,4" (Neuron runtime configuration guide)."""
    cores: list[int] = []
    for part in value.split(","):
        first, _, last = part.strip().partition("-")
        cores += range(int(first), int(last or first) + 1)
    return cores


def logical_core_count(environ: dict[str, str] | None = None) -> int:
    """The visible logical cores, ``vnc_count()`` (NeuronDevice.cpp:213-224,
    nrt_get_visible_vnc_count): those NEURON_RT_VISIBLE_CORES names, else every core of
    the instance at the logical-core size (NEURON_LOGICAL_NC_CONFIG, 2 by default)."""
    environ = os.environ if environ is None else environ
    named = environ.get("NEURON_RT_VISIBLE_CORES")
    if named:
        return len(visible_cores(named))
    chips = int(environ.get("FAKE_TORCH_NEURONX_CHIPS", "16"))
    lnc = int(environ.get("NEURON_LOGICAL_NC_CONFIG", "2"))
    return chips * PHYSICAL_CORES_PER_CHIP // lnc


def device_count() -> int:
    """The local world size once the process group set it, else the visible cores
    (NeuronDevice.cpp:228-236; torch-neuronx's test_multi_device_with_distributed.py:59-60
    asserts the count is not 1 after init with one core per process)."""
    lws = int(STATE["local_world_size"])
    return lws if lws != -1 else logical_core_count()


def vnc_id(index: int) -> int:
    """The runtime's core for PyTorch index ``index`` (NeuronDevice.cpp:189-211): the
    same before init; after it, only the process's own index and the ones above it
    within the local world size, counted from the process's own."""
    lws, start = int(STATE["local_world_size"]), int(STATE["start"])
    if lws == -1:
        return index
    if index >= lws:  # NeuronDevice.cpp:198-201
        raise ValueError(f"Device index {index} is out of range. Valid range is 0 to {lws - 1}")
    if index < start:  # NeuronDevice.cpp:203-207
        raise ValueError(
            "Attempted to access device that doesn't attach to this process, received "
            f"{index} expected to be equal or greater than {start}"
        )
    return index - start


def start_runtime() -> None:
    """``torch_neuronx._lazy_init`` (__init__.py:137-160): nrt_init, once per process."""
    STATE["runtime"] = True


def _index(device) -> int | None:
    """A device argument as torch-neuronx reads it: an int, a torch.device or a string
    such as ``"neuron:1"`` (neuron.py:30, __init__.py:220-229); None for "current"."""
    if device is None:
        return None
    if isinstance(device, int):
        return device
    if isinstance(device, str):  # "neuron", "neuron:1" (as torch.device parses it)
        _, _, index = device.partition(":")
        return int(index) if index else None
    return getattr(device, "index", None)


class NeuronDeviceModule:
    """The calls our code and torchtitan make on ``torch.neuron`` (torch_neuronx/neuron.py)."""

    fake = True

    def __init__(self) -> None:
        self._current: int | None = None  # thread-local current_device_index (set_device)

    def is_initialized(self) -> bool:
        return bool(STATE["runtime"])

    def is_available(self) -> bool:
        return self.device_count() > 0

    def device_count(self) -> int:
        return device_count()

    def current_device(self) -> int:
        """The index set_device chose, else the process group's (the process-wide
        default, NeuronDevice.cpp:97-109 and :180-186), else 0."""
        if self._current is not None:
            return self._current
        return max(int(STATE["start"]), 0)

    def set_device(self, device) -> None:
        """torch_neuronx.set_device (__init__.py:196-206), then the C++ check against
        this process's own range (NeuronDevice.cpp:126-134)."""
        index = _index(device)
        index = self.current_device() if index is None else index
        count = self.device_count()
        if index < 0 or index >= count:  # __init__.py:202-204
            raise ValueError(f"Invalid device id: {index}. Valid range is 0 to {count - 1}")
        start = max(int(STATE["start"]), 0)
        visible = logical_core_count()
        if index < start or index >= start + visible:  # NeuronDevice.cpp:128-134
            raise ValueError(
                f"Device index {index} is out of range. Valid range is {start} to "
                f"{start + visible - 1} for this process"
            )
        self._current = index

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        pass

    def get_amp_supported_dtype(self) -> list:
        """torch_neuronx/neuron.py:80-84 (what torch.autocast asks the device module)."""
        import torch

        return [torch.float32, torch.float16, torch.bfloat16]

    def synchronize(self, device=None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_name(self, device=None) -> str:
        """torch_neuronx/neuron.py:36-53: the device's own string."""
        return f"neuron:{self.current_device() if _index(device) is None else _index(device)}"

    def get_device_properties(self, device=None):
        """torch_neuronx.get_device_properties (__init__.py:209-238; neuron.py:287-302):
        the index is checked against ``device_count()``, the runtime is started, and the
        *PyTorch index* goes to ``nrt_get_vnc_memory_stats`` (NeuronBindings.cpp:389),
        which knows only this process's cores, numbered from 0 (inferred: every other
        runtime call maps the index through ``get_vnc_id`` first). Off them the call
        fails and ``total_memory`` is 0, with a warning (NeuronBindings.cpp:393-400).
        ``name`` is the instance family (PlatformUtils.cpp:61-62: "trn2")."""
        import sys

        if device is None:  # neuron.py:300-302: the current device's index
            index = self.current_device()
        else:  # a torch.device or string without an index is device 0 (__init__.py:227)
            index = _index(device) or 0
        if index < 0 or index >= self.device_count():  # __init__.py:231-233
            raise ValueError(f"Invalid device id: {index}")
        start_runtime()  # __init__.py:235-236
        if index < logical_core_count():
            lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "2"))
            total = HBM_PER_CHIP * lnc // PHYSICAL_CORES_PER_CHIP
        else:
            print(
                f"WARNING Failed to get VNC memory stats for device {index}, status: 1. "
                "Falling back to total_memory=0",
                file=sys.stderr,
            )
            total = 0
        return SimpleNamespace(name="trn2", total_memory=total)

    def memory_stats(self, device=None) -> dict:
        """torch-neuronx's nested statistics keyed by the PyTorch index
        (memory.py:13-54; NeuronBindings.cpp:1239-1242): what training/metrics.py reads.
        With the CPU fallback the allocator's counts are real (tensors.py)."""
        from .tensors import ALLOCATED

        index = _index(device)
        index = self.current_device() if index is None else index
        current, peak = ALLOCATED.get(index, (0, 0))
        entry = {"current": current, "peak": peak, "allocated": peak, "freed": peak - current}
        zero = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
        return {"allocated_bytes": dict(entry), "reserved_bytes": zero,  # "always 0"
                "active_bytes": dict(entry), "num_alloc_retries": 0, "num_ooms": 0}  # fmt: skip

    def reset_peak_memory_stats(self, device=None) -> None:
        from .tensors import reset_peak

        index = _index(device)
        reset_peak(self.current_device() if index is None else index)
