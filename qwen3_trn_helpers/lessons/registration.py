"""A toy out-of-tree device, registered live in a child process: what TorchNeuron does.

PyTorch keeps one dispatch key, PrivateUse1, for a backend that lives outside its
repository. TorchNeuron fills it with three documented calls; :func:`toy_backend_demo`
makes the same three calls for a made-up device called ``toydev`` in a separate Python
process and reports what PyTorch and torchtitan see before and after each one.

It is plainly a teaching toy, not Trainium: it registers names and a device module, but
no kernels, so a tensor cannot compute on it, and the demo shows that too. Computing is
the part TorchNeuron adds (its operators compile to Neuron executables).
"""

from __future__ import annotations

import os


def _toy_backend_here(available: bool) -> dict:
    """The three registration steps in *this* process (a child: see toy_backend_demo)."""
    import types

    import torch
    from torch._utils import _get_available_device_type
    from torchtitan.tools.utils import get_device_info

    seen = []

    def ask(question):
        try:
            return question()
        except Exception as e:  # what PyTorch says when a step is still missing
            return f"{type(e).__name__}: {str(e).splitlines()[0]}"

    def look(stage: str) -> None:
        seen.append({
            "after": stage,
            "privateuse1 name": torch._C._get_privateuse1_backend_name(),
            "_get_available_device_type()": ask(_get_available_device_type),
            "torch.accelerator.is_available()": ask(torch.accelerator.is_available),
            "torchtitan would pick": ask(lambda: get_device_info()[0]),
            "tensor.is_toydev exists": hasattr(torch.Tensor, "is_toydev"),
        })  # fmt: skip

    look("nothing (a plain CPU torch)")
    torch.utils.rename_privateuse1_backend("toydev")
    look("1. rename_privateuse1_backend('toydev')")

    toydev = types.ModuleType("toydev")
    toydev.is_available = lambda: available
    toydev.device_count = lambda: 2
    toydev.current_device = lambda: 0
    toydev.set_device = lambda index: None
    toydev._is_in_bad_fork = lambda: False
    toydev.manual_seed_all = lambda seed: None
    torch._register_device_module("toydev", toydev)
    look("2. _register_device_module('toydev', module)")

    torch.utils.generate_methods_for_privateuse1_backend()
    look("3. generate_methods_for_privateuse1_backend()")

    try:
        torch.ones(2).to("toydev")
        computed = "computed (unexpected)"
    except Exception as e:  # no kernels registered for PrivateUse1: nothing can compute
        computed = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return {"stages": seen, "tensor.to('toydev')": computed}


def toy_backend_demo(available: bool = True) -> dict:
    """Run the three registration steps for ``toydev`` in a child process; what changed.

    ``available`` is what the toy device module's ``is_available()`` answers. The child
    runs with device-backend autoload off, so on trn2 torch-neuronx stays out of it and
    PrivateUse1 is free to rename.
    """
    from ..runs import child

    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return child.call(_toy_backend_here, available, env=env, timeout=300)


def _round_trip_here() -> dict:
    """A tensor to this machine's training device and back (in a child: see below)."""
    import time

    import torch

    from ..device import detect_device_type

    device = torch.device(detect_device_type())
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    times = []
    for _ in range(3):  # the same op three times: on Neuron the first call compiles
        start = time.perf_counter()
        y = (x.to(device) * 2 + 1).cpu()
        times.append(time.perf_counter() - start)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        z = x.to(device) @ x.to(device).T
    return {
        "device": str(device),
        "result correct": bool(torch.equal(y, x * 2 + 1)),
        "seconds per call": [round(t, 4) for t in times],
        "autocast matmul dtype": str(z.dtype),
    }


def device_round_trip() -> dict:
    """Copy a tensor to this machine's training device, compute, copy back: in a child.

    On trn2 this is the first time a NeuronCore computes, which starts the Neuron
    runtime in that process; doing it in a child keeps the notebook kernel off the
    device (torch-neuronx would then refuse the process groups of later runs). A class
    sharing one trn2: the child takes the student's first core (runs/child.py).
    """
    from ..runs import child

    return child.call(_round_trip_here, timeout=900)
