"""Notebook 01's toy device computes: its own kernels plus a counting CPU fallback give
the CPU's losses and gradients (in a child process, as the notebook runs it)."""

import pytest


@pytest.mark.slow
def test_toy_device_trains_like_the_cpu():
    from qwen3_trn_helpers.lessons.toy_device import toy_device_training

    result = toy_device_training(steps=3)
    # TorchNeuron's name, registered in a child process where torch-neuronx never loads
    assert (result["device"], result["privateuse1 name"]) == ("neuron:0", "neuron")
    assert len(result["toy_losses"]) == 3
    assert result["toy_losses"] == pytest.approx(result["cpu_losses"], abs=1e-6)
    assert result["toy_losses"][-1] < result["toy_losses"][0]  # it trained
    assert result["max_grad_diff"] <= 1e-6
    # the matrix products ran on the toy device's own kernels, once per use...
    assert result["own_kernels"]["aten::addmm"] >= 3 and result["own_kernels"]["aten::mm"] >= 3
    # ...and the rest reached the CPU through the fallback, which counted each operator
    caught = result["fell_back"]
    assert any(op.startswith("aten::gelu") for op in caught)
    assert not any(op in ("aten::mm", "aten::addmm") for op in caught)


def test_toy_device_refuses_a_process_whose_privateuse1_is_taken():
    """Only a child with a free PrivateUse1 may register the toy as ``neuron``: a
    process that already renamed it (as torch-neuronx's autoload does on a trn2) gets
    one line naming the fix, not torch's rename error."""
    import subprocess
    import sys

    code = (
        "import torch; torch.utils.rename_privateuse1_backend('elsewhere')\n"
        "from qwen3_trn_helpers.lessons.toy_device import _child\n"
        "try:\n    _child(1, 0)\nexcept Exception as e:\n    print(type(e).__name__, e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "ConfigError" in out.stdout and "'elsewhere'" in out.stdout, out.stdout + out.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in out.stdout
