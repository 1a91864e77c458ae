"""Solutions to the exercises of 03_ten_step_run."""

from pathlib import Path

from qwen3_trn_helpers.metrics import read_metrics


def mean_step_time(metrics_path: str | Path) -> float:
    """Exercise 1: step 1 includes one-off costs (allocation, warm caches, on trn2 the
    graph compilation), so it is not representative of the steady state."""
    records = read_metrics(metrics_path)[1:]
    return sum(r["step_time_s"] for r in records) / len(records)


def drop_per_step(losses: list[float]) -> float:
    """Exercise 2: average loss change per step (negative = falling).

    On CPU the local "published" model was pretrained on the same corpus, so the 10 steps
    simply continue its training and the loss keeps falling; the random model's updates
    first only learn which tokens are frequent. With the real 4B model on new text the
    pretrained curve is much flatter: there is little left to learn in 10 steps."""
    return (losses[-1] - losses[0]) / (len(losses) - 1)
