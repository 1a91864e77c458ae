"""Solutions to the exercises of 01_device_registration
(tested by tests/core/lessons/test_solutions.py)."""

import torch

from qwen3_trn_helpers.lessons import toy_backend_demo


def exercise_1() -> dict:
    """The toy device registered but unavailable: PyTorch does not report it.

    ``_get_available_device_type()`` only returns a PrivateUse1 backend whose module says
    ``is_available()``; torchtitan then falls back to "cuda" as with no accelerator, and
    on a trn2 whose driver sees no cores it would fail at its first ``set_device``. This
    package's ``resolve_device("auto")`` asks the same question and chooses the CPU
    there (and ``--device neuron`` says no Trainium device is visible).
    """
    return toy_backend_demo(available=False)["stages"][-1]


def exercise_2(seed: int = 0) -> float:
    """Largest |autocast bf16 - fp32| of a 64x64 matmul of unit normals: about 0.1.

    The inputs are rounded to bf16 (8 significant bits: relative error up to 2^-8
    each) and the result too: a typical entry (size ~8) is off by ~0.03, and the
    largest of 4,096 entries by 3-4 times that. The exact value depends on the CPU's
    bf16 kernels, so the answer key states a range (0.03 to 0.3).
    """
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        low = a @ b
    return (low.float() - a @ b).abs().max().item()
