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
rest of the report come from ``neuron-ls --json-output`` in a child process.
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

from .errors import DeviceError
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
            "installed (see README, 'On Trainium'), or use --device cpu"
        )
    raise DeviceError(f"device {requested!r} requested but this machine has {detected!r}")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def neuron_ls() -> list[dict] | None:
    """``neuron-ls --json-output``: one object per Trainium chip (None without the tool).

    Runs in a child process, so the Neuron runtime is not started in this one.
    """
    tool = shutil.which("neuron-ls")
    if tool is None:
        return None
    try:
        proc = subprocess.run(
            [tool, "--json-output"], capture_output=True, text=True, timeout=60, check=True
        )
        devices = json.loads(proc.stdout)
    except (subprocess.SubprocessError, json.JSONDecodeError, OSError):
        return None
    return devices if isinstance(devices, list) else None


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
    if device_type == "neuron":
        count = int(torch.neuron.device_count())  # type: ignore[attr-defined]
        devices = neuron_ls() or []
        chips = len(devices) or None
        name = f"Trainium ({chips} chips)" if chips else "Trainium"
        if lnc is None:
            configs = {d.get("logical_neuroncore_config") for d in devices}
            lnc = f"{configs.pop()} (runtime default)" if len(configs) == 1 else "2 (trn2 default)"
    elif device_type == "cuda":
        name, count = torch.cuda.get_device_name(), torch.cuda.device_count()
    else:
        name, count = platform.processor() or platform.machine() or "cpu", 1
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
        torchtitan=_version("torchtitan"),
        transformers=_version("transformers"),
        triton=triton_summary(),
        cpu_count=os.cpu_count() or 1,
        note=device_note(),
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
