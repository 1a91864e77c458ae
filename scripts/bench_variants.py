"""Step time of the variants on the tiny presets, side by side in one run (CPU).

    .venv/bin/python scripts/bench_variants.py [--steps 12] [--rounds 2]

Prints median step times (first two steps skipped) and the two ratios the tutorial
discusses: transformers_v5 / native (same dense model, two implementations) and
nki_moe blockwise reference / torchtitan's grouped_mm MoE (same MoE model, two expert
implementations). Rounds alternate the configurations so machine noise hits all alike.
Absolute times on a laptop say nothing about trn2; the ratios say what each
implementation costs here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

CONFIGS = {
    "native": dict(variant="native"),
    "transformers_v5": dict(variant="transformers_v5"),
    "nki_moe blockwise": dict(variant="nki_moe", moe_impl="blockwise"),
    "nki_moe grouped_mm": dict(variant="nki_moe", moe_impl="grouped_mm"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from qwen3_trn_helpers.train import run

    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, kwargs in CONFIGS.items():
                out = Path(tmp) / f"{name.replace(' ', '_')}-{r}"
                result = run(steps=args.steps, out=out, progress=False, **kwargs)
                times[name] += [m["step_time_s"] for m in result.metrics[2:]]
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in med.items():
        print(f"{name:<20} {t * 1000:7.1f} ms/step  ({len(times[name])} steps)")
    print(f"transformers_v5 / native:                 {med['transformers_v5'] / med['native']:.2f}")
    ratio = med["nki_moe blockwise"] / med["nki_moe grouped_mm"]
    print(f"nki_moe blockwise / torchtitan grouped_mm: {ratio:.2f}")


if __name__ == "__main__":
    main()
