"""Per-step time of our helper vs torchtitan's own entry point, same config, one run.

    .venv/bin/python scripts/bench_overhead.py [--steps 20] [--rounds 2]

Both sides train ``qwen3_trn_tiny_native`` (config_registry.py): ours through
``qwen3_trn_helpers.train.run`` in this process, torchtitan's through
``python -m torchtitan.train --module qwen3_trn_helpers --config ...`` in a subprocess.
Step time comes from the same place on both sides (torchtitan's throughput metric:
tokens per step / tokens per second); the first two steps are warm-up and skipped.
Rounds alternate A, B, A, B so a slow moment of the machine hits both. Goal: ratio <= 1.05.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TOKENS_PER_STEP = 256  # tiny preset: seq_len 256 x local batch 1
STEP_LINE = re.compile(r"step:\s*(\d+)\s+loss:.*?tps: ([\d,]+)")


def ours(steps: int, out: Path) -> list[float]:
    from qwen3_trn_helpers.train import run

    result = run("native", steps=steps, out=out, progress=False)
    return [TOKENS_PER_STEP / m["tokens_per_s"] for m in result.metrics]


def torchtitan_entry_point(steps: int, out: Path) -> list[float]:
    env = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29571",
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "torchtitan.train",
        "--module",
        "qwen3_trn_helpers",
        "--config",
        "qwen3_trn_tiny_native",
        "--training.steps",
        str(steps),
        "--dump_folder",
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    times = [
        TOKENS_PER_STEP / int(tps.replace(",", ""))
        for _, tps in STEP_LINE.findall(proc.stdout + proc.stderr)
    ]
    if len(times) != steps:
        raise RuntimeError(f"expected {steps} step lines, parsed {len(times)}")
    return times


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
    print(f"median step time, helper run():          {ma * 1000:7.1f} ms  ({len(a)} steps)")
    print(f"median step time, torchtitan.train main: {mb * 1000:7.1f} ms  ({len(b)} steps)")
    print(f"ratio helper / torchtitan: {ma / mb:.3f}  (goal <= 1.05)")


if __name__ == "__main__":
    main()
