"""Per-step time of our helper vs torchtitan's own entry point, same config, one run.

    .venv/bin/python scripts/bench_overhead.py [--steps 20] [--rounds 2]

Both sides train ``qwen3_trn_tiny_native`` (config_registry.py): ours through
``qwen3_trn_helpers.run`` in this process, torchtitan's through
``python -m torchtitan.train --module qwen3_trn_helpers --config ...`` in a subprocess.
Both write metrics.jsonl through the same trainer config, so step times come from the
same place (torchtitan's MetricsProcessor); the first two steps are warm-up and skipped.
Rounds alternate A, B, A, B so a slow moment of the machine hits both. Goal: <= 1.05.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path


def ours(steps: int, out: Path) -> list[float]:
    from qwen3_trn_helpers import run

    result = run("native", steps=steps, out=str(out), progress=False)
    return [m["step_time_s"] for m in result.metrics]


def torchtitan_entry_point(steps: int, out: Path) -> list[float]:
    from qwen3_trn_helpers.lessons.torchtitan_view import torchtitan_entry_point as launch

    _, records, _ = launch("qwen3_trn_tiny_native", out, "--training.steps", str(steps))
    return [m["step_time_s"] for m in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    a: list[float] = []
    b: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            a += ours(args.steps, Path(tmp) / f"ours{r}")[2:]
            b += torchtitan_entry_point(args.steps, Path(tmp) / f"tt{r}")[2:]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"median step time, qwen3_trn_helpers.run: {ma * 1000:7.1f} ms  ({len(a)} steps)")
    print(f"median step time, torchtitan.train main: {mb * 1000:7.1f} ms  ({len(b)} steps)")
    print(f"ratio helper / torchtitan: {ma / mb:.3f}  (goal <= 1.05)")


if __name__ == "__main__":
    main()
