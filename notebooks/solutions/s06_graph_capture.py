"""Solutions to the exercises of 06_graph_capture
(tested by tests/core/training/test_compile.py)."""

from pathlib import Path

import torch

from qwen3_trn_helpers.lessons import capture_report, eager_vs_compiled


def clip_to_unit_norm(x: torch.Tensor) -> torch.Tensor:
    """The exercise's function: a Python ``if`` on a tensor's value (a graph break)."""
    norm = x.norm()
    if norm.item() > 1.0:
        return x / norm
    return x


def clip_to_unit_norm_graph_safe(x: torch.Tensor) -> torch.Tensor:
    """The same maths with no value read back: divide by max(norm, 1)."""
    return x / x.norm().clamp(min=1.0)


def exercise_1() -> tuple[dict, dict, float]:
    """Before and after: dynamo's report of each, and the largest difference of their
    results. The first breaks the graph at ``.item()`` (two graphs); the second is one
    graph. The same mistake, a Python value taken from a tensor, is what
    ``--compile`` first met in this package's attention (a SymBool for ``is_causal``)."""
    x = torch.randn(64) * 3
    before = capture_report(clip_to_unit_norm, x)
    after = capture_report(clip_to_unit_norm_graph_safe, x)
    small = torch.randn(64) * 0.01  # the other branch
    diff = max(
        (clip_to_unit_norm(v) - clip_to_unit_norm_graph_safe(v)).abs().max().item()
        for v in (x, small)
    )
    return before, after, diff


def exercise_2(workdir: Path, steps: int = 8) -> dict[str, list[float]]:
    """The first step of each run, as a restarted kernel sees them (one repeat each).

    The compiled run's first step changes most: with inductor's cache warm it falls
    from the cold compile (tens of seconds on a 2-core CPU) to seconds, while eager's
    first step and both steady states stay within the machine's noise. The cache is
    on disk (the folder in the table of ``--compile``'s settings), not in the kernel,
    so a restart keeps it; dynamo's own trace is redone either way, being per model."""
    times = eager_vs_compiled(workdir, steps=steps, repeats=1)
    return {label: times.first_steps(label) for label in ("eager", "compiled")}
