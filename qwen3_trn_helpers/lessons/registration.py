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

import json
import os
import subprocess
import sys

_SCRIPT = r"""
import json, sys, types
import torch
AVAILABLE = sys.argv[1] == "1"
from torch._utils import _get_available_device_type

seen = []

def ask(question):
    try:
        return question()
    except Exception as e:  # what PyTorch says when a step is still missing
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"

def look(stage):
    from torchtitan.tools.utils import get_device_info
    seen.append({
        "after": stage,
        "privateuse1 name": torch._C._get_privateuse1_backend_name(),
        "_get_available_device_type()": ask(_get_available_device_type),
        "torch.accelerator.is_available()": ask(torch.accelerator.is_available),
        "torchtitan would pick": ask(lambda: get_device_info()[0]),
        "tensor.is_toydev exists": hasattr(torch.Tensor, "is_toydev"),
    })

look("nothing (a plain CPU torch)")
torch.utils.rename_privateuse1_backend("toydev")
look("1. rename_privateuse1_backend('toydev')")

toydev = types.ModuleType("toydev")
toydev.is_available = lambda: AVAILABLE
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
print(json.dumps({"stages": seen, "tensor.to('toydev')": computed}))
"""


def toy_backend_demo(available: bool = True) -> dict:
    """Run the three registration steps for ``toydev`` in a child process; what changed.

    ``available`` is what the toy device module's ``is_available()`` answers. The child
    runs with device-backend autoload off, so on trn2 torch-neuronx stays out of it and
    PrivateUse1 is free to rename.
    """
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, "1" if available else "0"],
        capture_output=True, text=True, timeout=300, check=True, env=env,
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


_ROUND_TRIP = r"""
import json, time
import torch
from qwen3_trn_helpers.device import detect_device_type
device = torch.device(detect_device_type())
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
times = []
for _ in range(3):  # the same op three times: on Neuron the first call compiles
    start = time.perf_counter()
    y = (x.to(device) * 2 + 1).cpu()
    times.append(time.perf_counter() - start)
with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
    z = x.to(device) @ x.to(device).T
print(json.dumps({
    "device": str(device),
    "result correct": bool(torch.equal(y, x * 2 + 1)),
    "seconds per call": [round(t, 4) for t in times],
    "autocast matmul dtype": str(z.dtype),
}))
"""


def device_round_trip() -> dict:
    """Copy a tensor to this machine's training device, compute, copy back: in a child.

    On trn2 this is the first time a NeuronCore computes, which starts the Neuron
    runtime in that process; doing it in a child keeps the notebook kernel off the
    device (torch-neuronx would then refuse the process groups of later runs).
    """
    from ..training.launch import one_process_share_environment

    proc = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIP], capture_output=True, text=True, timeout=900,
        check=True, env=one_process_share_environment(dict(os.environ)),  # a class's share
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])
