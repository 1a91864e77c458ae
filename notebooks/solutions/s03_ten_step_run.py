"""Solutions to the exercises of 03_ten_step_run."""

from pathlib import Path

from qwen3_trn_helpers.metrics import read_metrics
from qwen3_trn_helpers.train import run


def mean_step_time(metrics_path: str | Path) -> float:
    """Exercise 1: step 1 includes one-off costs (allocation, warm caches), so skip it."""
    records = read_metrics(metrics_path)[1:]
    return sum(r["step_time_s"] for r in records) / len(records)


def compare_learning_rates(out: str | Path, steps: int = 10) -> dict[float, list[float]]:
    """Exercise 2: the same run at two learning rates."""
    out = Path(out)
    return {
        lr: run("native", steps=steps, lr=lr, out=out / f"lr{lr}", progress=False).losses
        for lr in (8e-4, 3e-3)
    }
