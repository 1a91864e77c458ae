"""Solutions to the exercises of 03_ten_step_run
(tested by tests/core/lessons/test_solutions.py)."""

import math
from pathlib import Path

from qwen3_trn_helpers import read_metrics, run


def exercise_1(metrics_path: Path) -> tuple[float, float]:
    """Perplexity at steps 1 and 10 of one run."""
    records = read_metrics(metrics_path)
    return math.exp(records[0]["loss"]), math.exp(records[-1]["loss"])


def exercise_2(workdir: Path, variant: str = "native") -> tuple[float, float]:
    """Step-1 loss of the pretrained model on text it was trained on, and on held-out
    text. The first is lower: part of what a model 'knows' about its training text is
    memorised, which is why evaluation holds data out."""
    seen = run(variant, init="pretrained", steps=1, corpus="embedded-pretrain",
               out=workdir / "seen", progress=False)  # fmt: skip
    unseen = run(variant, init="pretrained", steps=1, corpus="embedded",
                 out=workdir / "unseen", progress=False)  # fmt: skip
    return seen.losses[0], unseen.losses[0]


def exercise_3(workdir: Path, variant: str = "native", steps: int = 10) -> list[float]:
    """Random init at 10x the learning rate. Step 1's loss is the default run's, to the
    digit: it is computed before the first update. Afterwards the larger steps move the
    tiny model faster; watch for spikes, which on a large model is how runs diverge."""
    return run(variant, lr=8e-3, steps=steps, out=workdir / "lr", progress=False).losses
