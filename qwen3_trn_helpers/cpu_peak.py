"""This CPU's peak: the rate a planner or a report divides by, measured, not assumed.

Below the layers that use it (the planner's CPU machine, ``qwen3-trn doctor``, the
benchmark script), so none of them reaches up into the lessons for it.
"""

from __future__ import annotations


def cpu_matmul_peak(n: int = 2048, repeats: int = 3) -> float:
    """This CPU's bf16 matmul throughput in FLOP/s: the best of ``repeats`` n^3 products.

    What "peak" means on a CPU for this course: the rate torch reaches on a large bf16
    matrix product with all threads, which is the ceiling for the model's matmuls.
    """
    import time

    import torch

    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    a @ b  # warm-up: thread pool, kernel selection
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best
