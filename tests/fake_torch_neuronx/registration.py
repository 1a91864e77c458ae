"""What torch-neuronx does when torch imports it: PrivateUse1 becomes ``neuron``, with
``torch.neuron`` as its device module and a ``neuron`` process-group backend.

Uses torch's Python route for an out-of-tree backend
(``torch.utils.backend_registration._setup_privateuseone_for_python_backend``), as
lessons/toy_device.py does: torch then reports the device as torch-neuronx's C++
registration makes it report (``torch.accelerator``, ``_get_available_device_type``).
No operator has a kernel unless the CPU fallback is on (cpu_fallback.py): without it a
tensor made on ``neuron`` fails, which is where the double stops ("as far as our code
goes before tensors are made").
"""

from __future__ import annotations

import os


def autoload() -> None:
    """The ``torch.backends`` entry point (torch/__init__.py, _import_device_backends)."""
    import torch
    import torch.distributed as dist
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from . import autocast, cpu_fallback, device_module, process_group

    _setup_privateuseone_for_python_backend(
        "neuron", backend_module=device_module.NeuronDeviceModule()
    )
    if dist.is_available():
        # torch-neuronx registers its ProcessGroupNeuron under the name "neuron" for the
        # device "neuron" (distributed/backend.py:53-58, run at import, :65)
        dist.Backend.register_backend(
            "neuron", process_group.create_neuron_process_group, devices=["neuron"]
        )
    if os.environ.get(cpu_fallback.ENABLE_VAR) == "1":
        # opt in: tensors on neuron compute on the CPU (the probe of issue 29, item 6)
        cpu_fallback.install("neuron")
        cpu_fallback.add_streams(torch.neuron)
        autocast.install("neuron")
        # a limit of the Python route, not of torch-neuronx: autograd keeps one device
        # thread per index the Python device guard reports (always 1), so backward on
        # neuron:1 needs autograd's multithreading off in the thread that calls it (the
        # main one), as torchtitan 0.3.0 runs anyway (distributed/utils.py:474-477)
        torch.autograd.set_multithreading_enabled(False)
        if os.environ.get("FAKE_TORCH_NEURONX_RECORD") and "RANK" in os.environ:
            cpu_fallback.record_to = os.environ["FAKE_TORCH_NEURONX_RECORD"]
    torch.neuron.fake = True  # type: ignore[attr-defined]  (a test can tell it is the double)
