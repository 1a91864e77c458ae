"""Which device this machine trains on, and a report a notebook can show.

TorchNeuron registers Trainium with PyTorch through the PrivateUse1 mechanism: after
``import torch`` (the backend autoloads since PyTorch 2.9) the PrivateUse1 backend is
renamed ``neuron`` and ``torch.neuron`` is its device module. torchtitan reads the same
registry (``torch._utils._get_available_device_type``), so on trn2 it picks ``neuron``
by itself. We never fake that registration: on a machine without Trainium the report
says ``cpu`` (or ``cuda``) and the Neuron-only cells say so.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass
from importlib import metadata

from .errors import DeviceError

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


def detect_device_type() -> str:
    """neuron, else cuda, else cpu: the order a trn2 user expects."""
    import torch

    if neuron_available():
        return "neuron"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def resolve_device(requested: str = "auto") -> str:
    """Turn a ``--device`` value into the device type to use, or say why it can't be."""
    if requested not in DEVICE_TYPES:
        raise DeviceError(f"unknown device {requested!r}; choose one of {', '.join(DEVICE_TYPES)}")
    detected = detect_device_type()
    if requested == "auto" or requested == detected or requested == "cpu":
        return detected if requested == "auto" else requested
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


def _device_name(device_type: str) -> str:
    import torch

    if device_type == "neuron":
        props = torch.neuron.get_device_properties()  # type: ignore[attr-defined]
        return str(getattr(props, "name", "neuron"))
    if device_type == "cuda":
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine() or "cpu"


def _device_count(device_type: str) -> int:
    import torch

    if device_type == "neuron":
        return int(torch.neuron.device_count())  # type: ignore[attr-defined]
    if device_type == "cuda":
        return torch.cuda.device_count()
    return 1


@dataclass(frozen=True)
class DeviceReport:
    """What this machine offers for training, in the terms the notebooks use."""

    device_type: str
    device_name: str
    device_count: int
    privateuse1_backend: str
    accelerator: str | None
    logical_nc_config: str | None
    python: str
    torch: str
    torch_neuronx: str | None
    torchtitan: str | None
    transformers: str | None
    cpu_count: int

    @property
    def on_trainium(self) -> bool:
        return self.device_type == "neuron"

    def rows(self) -> list[tuple[str, str]]:
        return [(k, "-" if v is None else str(v)) for k, v in asdict(self).items()]

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><td><b>{k}</b></td><td>{v}</td></tr>" for k, v in self.rows())
        return f"<table>{body}</table>"


def device_report() -> DeviceReport:
    """Collect the report; cheap, and safe on machines without any accelerator."""
    import torch

    device_type = detect_device_type()
    accelerator = None
    if hasattr(torch, "accelerator") and torch.accelerator.is_available():
        accelerator = str(torch.accelerator.current_accelerator())
    lnc = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    if lnc is None and device_type == "neuron":
        lnc = "2 (trn2 default)"
    return DeviceReport(
        device_type=device_type,
        device_name=_device_name(device_type),
        device_count=_device_count(device_type),
        privateuse1_backend=privateuse1_backend_name(),
        accelerator=accelerator,
        logical_nc_config=lnc,
        python=sys.version.split()[0],
        torch=torch.__version__,
        torch_neuronx=_version("torch-neuronx"),
        torchtitan=_version("torchtitan"),
        transformers=_version("transformers"),
        cpu_count=os.cpu_count() or 1,
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
        != "0",
    }
