"""Step time and fp32 losses with and without ``tie_embedding_before_fsdp``, one run each.

    .venv/bin/python scripts/bench_tied_embedding.py [--steps 8] [--rounds 6]

torchtitan 0.3.0 shards the tiny preset's tied embedding as two FSDP parameters
(training/patches.py); the patch makes it one. Both sides train the native tiny preset in
fp32 (``mixed_precision="float32"``), so their losses must agree exactly; step times come
from torchtitan's MetricsProcessor (metrics.jsonl), the first two steps skipped as
warm-up. Rounds alternate (off, on), (on, off), ... so a slow moment of a shared machine
hits both sides; read the median ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()

    from qwen3_trn_helpers import run
    from qwen3_trn_helpers.training.patches import disabled

    times: dict[str, list[float]] = {"off": [], "on": []}
    losses: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            scope = disabled("tie_embedding_before_fsdp") if mode == "off" else None
            with scope or contextlib.nullcontext(), tempfile.TemporaryDirectory() as out:
                result = run("native", steps=args.steps, mixed_precision="float32", out=out,
                             overwrite=True, progress=False)  # fmt: skip
            step_s = [m["step_time_s"] for m in result.metrics][2:]
            times[mode] += step_s
            losses.setdefault(mode, result.losses)
            print(f"round {r} patch {mode}: {1000 * statistics.median(step_s):.0f} ms/step")
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    diff = max(abs(a - b) for a, b in zip(losses["off"], losses["on"], strict=True))
    print(json.dumps({"median_ms_off": round(1000 * off), "median_ms_on": round(1000 * on),
                      "ratio_on_over_off": round(on / off, 3), "max_loss_diff": diff}))  # fmt: skip


if __name__ == "__main__":
    main()
