"""This CPU's peak: the rate a planner or a report divides by, measured, not assumed.

Below the layers that use it (the planner's CPU machine, ``qwen3-trn doctor``, the
benchmark script), so none of them reaches up into the lessons for it.
"""

from __future__ import annotations

from typing import Any


def cpu_training_dtype() -> Any:
    """The dtype a CPU run's matmuls use here: bf16 where oneDNN multiplies it, else
    float32 (training/plan.py makes the same choice for the run itself).

    Measuring bf16 on an AVX2-only CPU would time torch's scalar fallback loop: one
    2048^3 product took over 80 s there, and ``qwen3-trn doctor`` 257 s (CI, 2026-12-02).
    """
    import torch

    from .device import cpu_has_bf16_matmul

    return torch.bfloat16 if cpu_has_bf16_matmul() else torch.float32


def cpu_matmul_peak(n: int = 2048, repeats: int = 3) -> float:
    """This CPU's matmul throughput in FLOP/s, in :func:`cpu_training_dtype`: the best
    of ``repeats`` n^3 products.

    What "peak" means on a CPU for this course: the rate torch reaches on a large
    matrix product with all threads, in the dtype training uses here, which is the
    ceiling for the model's matmuls.
    """
    import time

    import torch

    dtype = cpu_training_dtype()
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    a @ b  # warm-up: thread pool, kernel selection
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best
