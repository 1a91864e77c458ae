"""``torch.neuron``, the device module, as far as our code calls it."""

from __future__ import annotations

import os

#: physical NeuronCores per Trainium2 chip (AWS trn2 architecture page)
PHYSICAL_CORES_PER_CHIP = 8


def visible_cores(value: str) -> list[int]:
    """NEURON_RT_VISIBLE_CORES: "3", "8-15" or "0,2,4" (Neuron runtime configuration guide)."""
    cores: list[int] = []
    for part in value.split(","):
        first, _, last = part.strip().partition("-")
        cores += range(int(first), int(last or first) + 1)
    return cores


def logical_core_count(environ: dict[str, str] | None = None) -> int:
    """torch.neuron.device_count(): the visible logical cores (torch-neuronx
    NeuronDevice.cpp, nrt_get_visible_vnc_count): those NEURON_RT_VISIBLE_CORES names,
    else every core of the instance at the logical-core size (NEURON_LOGICAL_NC_CONFIG,
    2 by default on trn2)."""
    environ = os.environ if environ is None else environ
    named = environ.get("NEURON_RT_VISIBLE_CORES")
    if named:
        return len(visible_cores(named))
    chips = int(environ.get("FAKE_TORCH_NEURONX_CHIPS", "16"))
    lnc = int(environ.get("NEURON_LOGICAL_NC_CONFIG", "2"))
    return chips * PHYSICAL_CORES_PER_CHIP // lnc


class NeuronDeviceModule:
    """The calls our code and torchtitan make on ``torch.neuron``."""

    fake = True

    def __init__(self) -> None:
        self._current = 0
        self._peaks: dict[int, int] = {}

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return self.device_count() > 0

    def device_count(self) -> int:
        return logical_core_count()

    def current_device(self) -> int:
        return self._current

    def set_device(self, device) -> None:
        index = device if isinstance(device, int) else (getattr(device, "index", None) or 0)
        if not 0 <= index < self.device_count():
            # torch-neuronx checks the index against the visible cores
            raise RuntimeError(
                f"invalid device index {index}: {self.device_count()} NeuronCores visible"
            )
        self._current = index

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:
        pass

    def synchronize(self, device=None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_name(self, device=None) -> str:
        return "Trainium2 (fake_torch_neuronx)"

    def get_device_properties(self, device=None):
        """``name`` is the instance family torchtitan's peak-FLOPS table reads
        (torchtitan/tools/utils.py: "trn2" -> 79 TFLOPS x LNC 2); ``total_memory`` one
        logical core's HBM (96 GiB per chip over 4 logical cores at LNC 2)."""
        from types import SimpleNamespace

        lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "2"))
        per_core = 96 * 2**30 * lnc // PHYSICAL_CORES_PER_CHIP
        return SimpleNamespace(name="trn2", total_memory=per_core)

    def memory_stats(self, device=None) -> dict:
        """torch-neuronx's nested statistics (what training/metrics.py reads)."""
        peak = self._peaks.get(self._current, 0)
        entry = {"current": 0, "peak": peak, "allocated": 0, "freed": 0}
        return {"allocated_bytes": dict(entry), "reserved_bytes": dict(entry),
                "active_bytes": dict(entry), "num_alloc_retries": 0, "num_ooms": 0}  # fmt: skip

    def reset_peak_memory_stats(self, device=None) -> None:
        self._peaks[self._current] = 0
