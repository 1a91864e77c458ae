"""Which device this machine trains on, and a report a notebook can show.

TorchNeuron registers Trainium with PyTorch through the PrivateUse1 mechanism: when
``import torch`` autoloads it (PyTorch's device-backend autoload, since 2.5), the
PrivateUse1 backend is renamed ``neuron`` and ``torch.neuron`` is its device module.
torchtitan reads the same registry (``torch._utils._get_available_device_type``), so on
trn2 it picks ``neuron`` by itself. We never fake that registration: on a machine without
Trainium the report says ``cpu`` (or ``cuda``) and the Neuron-only cells say so.

Nothing here starts the Neuron runtime. torch-neuronx starts it on the first call that
needs a device (``get_device_properties``, a tensor on ``neuron``, a kernel) and then
keeps its NeuronCores until the process exits; it also refuses to build a process group
once the runtime is up. ``is_available()`` and ``device_count()`` only ask the runtime
library how many cores are visible, so a notebook may call them; names, memory and the
rest of the report come from ``neuron-ls``'s JSON in a child process (``--output-format
json`` from Neuron 2.34, ``--json-output`` before).

torchtitan expects a ``torch.cuda``-like device module; :class:`CpuDeviceModule` is the
one a CPU run hands it (installed by ``training.patches.torchtitan_on_cpu``).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from types import SimpleNamespace
from typing import Any

from .errors import DeviceError
from .stack import collector_paused, torchtitan_stack
from .stack import installed_version as _version
from .without_triton import triton_summary

DEVICE_TYPES = ("auto", "neuron", "cuda", "cpu")


def privateuse1_backend_name() -> str:
    """Name of the out-of-tree backend torch knows ('privateuseone' when none)."""
    import torch

    return torch._C._get_privateuse1_backend_name()


def neuron_available() -> bool:
    """True only when TorchNeuron is installed and sees at least one NeuronCore."""
    import torch

    if privateuse1_backend_name() != "neuron":
        return False
    module = getattr(torch, "neuron", None)
    try:
        return bool(module is not None and module.is_available())
    except RuntimeError:  # driver present but no device visible
        return False


def other_accelerator() -> str | None:
    """An accelerator torch sees that this course does not train on (e.g. Apple's mps)."""
    import torch

    if not torch.accelerator.is_available():
        return None
    kind = torch.accelerator.current_accelerator().type
    return None if kind in ("cuda", "neuron") else kind


def detect_device_type() -> str:
    """neuron, else cuda, else cpu: the order a trn2 user expects.

    Other accelerators (a Mac's ``mps``) train on the CPU, so ``--device auto`` is the
    CPU on a Mac: torchtitan's FSDP and our patches are written for neuron, cuda and
    cpu, and nobody has shown torchtitan 0.3.0 training on MPS (not testable here), while
    the tiny presets are fast enough on a laptop CPU. :func:`device_note` says so.
    """
    with collector_paused():  # often the process's first import of torch
        import torch

    if neuron_available():
        return "neuron"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def device_note() -> str | None:
    """One line for the user when the device we train on is not the obvious one."""
    other = other_accelerator()
    if other is None:
        return None
    return (
        f"torch sees a {other!r} accelerator; this course trains on neuron, cuda or the "
        "CPU (torchtitan 0.3.0 is not shown to train on it), so --device auto is the CPU "
        "here and the tiny models train in seconds per step"
    )


def resolve_device(requested: str = "auto") -> str:
    """Turn a ``--device`` value into the device type to use, or say why it can't be."""
    if requested not in DEVICE_TYPES:
        raise DeviceError(f"unknown device {requested!r}; choose one of {', '.join(DEVICE_TYPES)}")
    if requested == "cpu":
        return "cpu"
    detected = detect_device_type()
    if requested in ("auto", detected):
        return detected
    if requested == "neuron":
        import torch

        raise DeviceError(
            "device 'neuron' requested but no Trainium device is visible "
            f"(PyTorch {torch.__version__}, PrivateUse1 backend "
            f"{privateuse1_backend_name()!r}); run on a trn2 instance with torch-neuronx "
            "installed (see docs/trn2.md), or use --device cpu"
        )
    raise DeviceError(f"device {requested!r} requested but this machine has {detected!r}")


@dataclass(frozen=True)
class Device:
    """A device type, decided once (in planning) with what every layer asks of it.

    Why: torchtitan, nanoGPT and nanochat each decide their device once and then use an
    object; comparing ``"neuron"`` and ``"cpu"`` strings in every layer had spread to 16
    files. Planning resolves one :class:`Device` and carries it on the Plan; the rest ask
    it (``device.is_trn2``, ``device.compile_backend``). :data:`DEVICES` holds the ones
    this course trains on; :func:`as_device` is the only place a name becomes one.

    Cheap: no torch until :attr:`torch_device` or :attr:`module` is asked, so a plan
    for a trn2 resolved on a laptop holds one too.
    """

    type: str  # torch's device type: "cpu", "cuda", "neuron" (or a lesson's own, "toy")
    process_group_backend: str  # torch.distributed's backend for its ranks
    compile_backend: str  # torch.compile's backend (inductor; torch-neuronx's "neuron")
    default_attention: str = "document"  # what --attention auto trains with here
    is_trn2: bool = False  # a NeuronCore: launched runs, HBM checks, the NEFF cache
    is_cpu: bool = False  # the host: gloo, RSS memory figures, free-memory checks
    is_cuda: bool = False  # FlexAttention's only trainer

    def __str__(self) -> str:
        return self.type

    @property
    def torch_device(self) -> Any:
        """``torch.device(type)`` (imports torch)."""
        import torch

        return torch.device(self.type)

    @property
    def module(self) -> Any:
        """The ``torch.cuda``-like module torchtitan talks to: ``torch.neuron``,
        ``torch.cuda``, and on the host :data:`CPU_DEVICE_MODULE` (``torch.cpu`` lacks
        the memory statistics torchtitan's metrics call). Imports torch."""
        import torch

        return CPU_DEVICE_MODULE if self.is_cpu else getattr(torch, self.type)


#: the devices this course trains on (TorchNeuron registers "neuron" as both its
#: device and its process-group backend: torch-neuronx's distributed/backend.py)
DEVICES: dict[str, Device] = {
    "cpu": Device("cpu", "gloo", "inductor", "document", is_cpu=True),
    "cuda": Device("cuda", "nccl", "inductor", "flex", is_cuda=True),
    "neuron": Device("neuron", "neuron", "neuron", "causal", is_trn2=True),
}


def as_device(device: Device | str) -> Device:
    """``device`` as a :class:`Device`: a name looked up in :data:`DEVICES` (another
    accelerator a lesson registers, such as ``toy``: inductor, its own process-group
    backend name), a Device as it is."""
    if isinstance(device, Device):
        return device
    return DEVICES.get(device) or Device(device, device, "inductor")


def cpu_has_bf16_matmul() -> bool:
    """Whether this CPU's bf16 matrix products run in oneDNN (AVX-512 or AMX).

    Without it (an AVX2-only CPU: no avx512bw, no AMX) torch multiplies bf16 matrices
    in its scalar fallback loop (``cpublas_gemm_impl``): a tiny-model step measured 87 s
    there against 2.4 s in float32 on the same AVX2 EPYC, so a CPU run there trains in
    float32 (:func:`mixed_precision_on`). Asked of torch itself, not read off CPU flags.
    """
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def mixed_precision_on(device: Device, asked: str) -> str:
    """The mixed precision a run that asks for ``asked`` trains in on ``device``: as
    asked, but float32 for bf16 on a CPU whose bf16 matrix products have no hardware
    path (:func:`cpu_has_bf16_matmul`: 35x slower than float32 there); the plan's
    summary then says so."""
    if device.is_cpu and asked == "bfloat16" and not cpu_has_bf16_matmul():
        return "float32"
    return asked


def resolve(requested: str = "auto") -> Device:
    """:func:`resolve_device`'s answer as a :class:`Device`."""
    return as_device(resolve_device(requested))


def device_elsewhere(requested: str) -> Device:
    """The device a run planned here for other machines (a cluster job's nodes) uses:
    ``auto`` is this machine's; a device named is the nodes', not looked for here."""
    return resolve(requested) if requested == "auto" else as_device(requested)


#: ``ru_maxrss`` is in KiB on Linux and in bytes on macOS (getrusage(2) on each)
RU_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


class CpuDeviceModule:
    """The slice of the ``torch.cuda`` API torchtitan calls, answered for the host CPU.

    torchtitan talks to its device through a module-level ``device_module``
    (``torch.cuda``, ``torch.neuron``); ``torch.cpu`` lacks the memory-statistics calls
    its metrics make. Memory figures are the process's peak resident set size
    (``ru_maxrss``), which cannot be reset, so "peak since last step" reads as "peak so
    far" on a CPU. torch is imported on call, so importing this module stays cheap.
    """

    @staticmethod
    def set_device(device: Any) -> None:
        import torch

        torch.cpu.set_device(device)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def synchronize(*args: Any, **kwargs: Any) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def reset_peak_memory_stats(*args: Any, **kwargs: Any) -> None:
        return None  # ru_maxrss cannot be reset

    @staticmethod
    def device_count() -> int:
        return 1  # one "device" per process: torchtitan then uses index 0 for every rank

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return f"cpu ({platform.processor() or platform.machine()})"

    @staticmethod
    def get_device_properties(device: Any = None) -> SimpleNamespace:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):  # Windows has no sysconf
            total = 0
        return SimpleNamespace(name="cpu", total_memory=total)

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        try:
            import resource  # Unix only
        except ImportError:  # Windows: no peak RSS without another package; report 0
            resource = None
        peak = 0
        if resource is not None:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RU_MAXRSS_UNIT
        return {
            "active_bytes.all.peak": peak,
            "reserved_bytes.all.peak": peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }


CPU_DEVICE_MODULE = CpuDeviceModule()


#: ``neuron-ls`` JSON flags, newest first. Neuron 2.34 removes ``--json-output`` (``-j``)
#: and selects its updated JSON with ``--output-format json`` (end-of-support notice of
#: 16 Oct 2026, announce-intent-eos-neuron-ls-json); up to 2.33 only ``--json-output``
#: exists. We ask for the new one first and fall back, so both releases work.
NEURON_LS_FLAGS: tuple[tuple[str, ...], ...] = (("--output-format", "json"), ("--json-output",))


#: a device object's NeuronCore count, under the names neuron-ls has used
CORE_COUNT_KEYS = ("nc_count", "neuroncore_count", "nc-count", "neuron_core_count")
#: a top-level device count, where the updated output carries one
DEVICE_COUNT_KEYS = ("neuron_device_count", "device_count", "num_devices", "nd_count")


def _is_device_list(value: object) -> bool:
    """A list of objects each carrying a NeuronCore count: chips, not processes."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(d, dict) and any(k in d for k in CORE_COUNT_KEYS) for d in value)
    )


def parse_neuron_ls(text: str) -> list[dict] | None:
    """One dict per Trainium chip from either ``neuron-ls`` JSON output, or None.

    ``--json-output`` (Neuron <= 2.33) prints a list with one object per device. The
    updated ``--output-format json`` (Neuron 2.34) adds top-level fields for what
    applies to more than one device (instance, UltraServer), so it is an object that
    holds the device list. Its field names are not in the documentation we could read,
    so the device list is the object's list whose objects each carry a NeuronCore count
    (``nc_count``; ``neuron_devices`` or ``devices`` first): a list of processes or
    anything else is never taken for the devices. A top-level device count, where there
    is one, must agree with the list (else None: the format is not what we think). A
    top-level logical-core setting is copied onto each device under the old name,
    ``logical_neuroncore_config``, which the report reads.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError):
        return None
    if isinstance(data, list):
        if not data:
            return []
        return [dict(d) for d in data] if _is_device_list(data) else None
    if not isinstance(data, dict):
        return None
    named = [data.get(k) for k in ("neuron_devices", "devices")]
    lists = [v for v in [*named, *data.values()] if _is_device_list(v)]
    if not lists:
        return None
    devices = [dict(d) for d in lists[0]]
    holders = [data, data.get("instance_info"), data.get("instance")]
    holders = [h for h in holders if isinstance(h, dict)]
    for holder in holders:
        for key in DEVICE_COUNT_KEYS:
            count = holder.get(key)
            if isinstance(count, int) and count != len(devices):
                return None
    lnc = None
    for holder in holders:
        for key in ("logical_neuroncore_config", "logical-neuroncore-config", "lnc"):
            if key in holder:
                lnc = holder[key]
                break
        if lnc is not None:
            break
    if lnc is not None:
        for d in devices:
            d.setdefault("logical_neuroncore_config", lnc)
    return devices


def neuron_ls_query() -> tuple[list[dict] | None, str]:
    """(chips, how): the devices ``neuron-ls`` lists and the command that listed them, or
    (None, one line saying why there is no list).

    Runs in a child process, so the Neuron runtime is not started in this one.
    """
    tool = shutil.which("neuron-ls")
    if tool is None:
        return None, "no neuron-ls on PATH"
    tried = []
    for flags in NEURON_LS_FLAGS:
        command = " ".join(("neuron-ls", *flags))
        try:
            proc = subprocess.run([tool, *flags], capture_output=True, text=True, timeout=60)
        except (subprocess.SubprocessError, OSError) as e:
            tried.append(f"{command}: {type(e).__name__}")
            continue
        devices = parse_neuron_ls(proc.stdout) if proc.returncode == 0 else None
        if devices is not None:
            return devices, command
        said = (proc.stderr or proc.stdout).strip().splitlines()
        tried.append(f"{command}: {said[0][:120] if said else f'exit status {proc.returncode}'}")
    return None, "neuron-ls gave no device list (" + "; ".join(tried) + ")"


def neuron_ls() -> list[dict] | None:
    """One object per Trainium chip (None without the tool or without a readable list)."""
    return neuron_ls_query()[0]


@dataclass(frozen=True)
class DeviceReport:
    """What this machine offers for training, in the terms the notebooks use."""

    device_type: str
    device_name: str
    device_count: int
    privateuse1_backend: str
    accelerator: str | None
    logical_nc_config: str | None
    neuron_chips: int | None
    python: str
    torch: str
    torch_neuronx: str | None
    torchtitan: str | None
    torchtitan_from: str | None
    torchtitan_fork: str | None
    transformers: str | None
    triton: str
    cpu_count: int
    note: str | None

    @property
    def on_trainium(self) -> bool:
        return self.device_type == "neuron"

    def rows(self) -> list[tuple[str, str]]:
        return [(k, "-" if v is None else str(v)) for k, v in asdict(self).items()]

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    def _repr_html_(self) -> str:
        from html import escape

        body = "".join(
            f"<tr><td><b>{escape(k)}</b></td><td>{escape(v)}</td></tr>" for k, v in self.rows()
        )
        return f"<table>{body}</table>"


def device_report() -> DeviceReport:
    """Collect the report: cheap, safe without an accelerator, never starts the runtime."""
    import torch

    device_type = detect_device_type()
    accelerator = None
    if torch.accelerator.is_available():
        accelerator = str(torch.accelerator.current_accelerator())
    lnc = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    chips = None
    notes = [device_note()]
    if device_type == "neuron":
        count = int(torch.neuron.device_count())  # type: ignore[attr-defined]
        listed, how = neuron_ls_query()
        if listed is None:
            notes.append(how)
        devices = listed or []
        chips = len(devices) or None
        name = f"Trainium ({chips} chips)" if chips else "Trainium"
        if lnc is None:
            configs = {d.get("logical_neuroncore_config") for d in devices}
            lnc = f"{configs.pop()} (runtime default)" if len(configs) == 1 else "2 (trn2 default)"
    elif device_type == "cuda":
        name, count = torch.cuda.get_device_name(), torch.cuda.device_count()
    else:
        name, count = platform.processor() or platform.machine() or "cpu", 1
    stack = torchtitan_stack()
    notes.append(stack.warning)
    return DeviceReport(
        device_type=device_type,
        device_name=name,
        device_count=count,
        privateuse1_backend=privateuse1_backend_name(),
        accelerator=accelerator,
        logical_nc_config=lnc,
        neuron_chips=chips,
        python=sys.version.split()[0],
        torch=torch.__version__,
        torch_neuronx=_version("torch-neuronx"),
        torchtitan=stack.version,
        torchtitan_from=stack.location,
        torchtitan_fork=stack.fork,
        transformers=_version("transformers"),
        triton=triton_summary(),
        cpu_count=os.cpu_count() or 1,
        note="; ".join(n for n in notes if n) or None,
    )


def registration_facts() -> dict[str, object]:
    """What PyTorch's device registry says here: the names TorchNeuron plugs into."""
    import torch
    import torch.distributed as dist

    backends = metadata.entry_points(group="torch.backends")
    return {
        "privateuse1 backend name": privateuse1_backend_name(),
        "torch.backends entry points (autoload)": sorted(ep.name for ep in backends) or "-",
        "torch.accelerator.is_available()": torch.accelerator.is_available(),
        "_get_available_device_type()": torch._utils._get_available_device_type(),
        "process-group backend for this device": dist.Backend.default_device_backend_map.get(
            detect_device_type(), "-"
        ),
        "autoload enabled (TORCH_DEVICE_BACKEND_AUTOLOAD)": os.environ.get(
            "TORCH_DEVICE_BACKEND_AUTOLOAD", "1"
        )
        == "1",
    }
