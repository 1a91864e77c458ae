"""Eager vs ``--compile`` step time, side by side in one run, plus the compile's cost.

    .venv/bin/python scripts/bench_compile.py [--steps 14] [--nproc 1 2]
        [--variants native transformers_v5 nki_moe] [--json FILE]

For each rank count and variant (tiny presets, sequence length 256, local batch 1,
the embedded corpus, bf16 compute as `qwen3-trn train` defaults), three runs of
``qwen3-trn train``, each in a fresh process (dynamo's in-memory cache would otherwise
hide the compile):

- eager;
- compiled with an empty inductor cache (a temporary folder): the first step holds the
  compile ("compile" column: that step's time minus the eager median);
- compiled again with the cache the previous run filled ("cached compile": the same
  difference, now mostly loading compiled code).

Steady state is the median step time of steps 4..N (the first steps compile, and with
document masking a change in the number of documents per sample recompiles once, then
dynamo treats that size as symbolic). Not a test: numbers depend on the machine and on
what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WARMUP = 3  # steps left out of the steady-state median


def train(variant: str, nproc: int, steps: int, out: Path, compile_: bool, cache: Path) -> list:
    """One `qwen3-trn train` in a child process; its step times (s)."""
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--variant", variant,
           "--nproc", str(nproc), "--steps", str(steps), "--out", str(out), "--no-progress",
           *(["--compile"] if compile_ else [])]  # fmt: skip
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step_time_s"] for line in lines if line.strip()]


def measure(variant: str, nproc: int, steps: int, root: Path) -> dict:
    cache = root / f"inductor-{variant}-{nproc}"
    eager = train(variant, nproc, steps, root / f"{variant}-{nproc}-eager", False, cache)
    cold = train(variant, nproc, steps, root / f"{variant}-{nproc}-cold", True, cache)
    warm = train(variant, nproc, steps, root / f"{variant}-{nproc}-warm", True, cache)
    e, c = statistics.median(eager[WARMUP:]), statistics.median(cold[WARMUP:])
    return {
        "variant": variant,
        "ranks": nproc,
        "eager_s": round(e, 3),
        "compiled_s": round(c, 3),
        "ratio": round(c / e, 2),
        "compile_s": round(cold[0] - e, 1),
        "cached_compile_s": round(warm[0] - e, 1),
        "steps_s": {"eager": eager, "compiled": cold, "compiled_cached": warm},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--variants", nargs="+", default=["native"])
    parser.add_argument("--json", help="also write every step time here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        for nproc in args.nproc:
            for variant in args.variants:
                rows.append(measure(variant, nproc, args.steps, Path(tmp)))
                r = rows[-1]
                print(f"{r['variant']:<16} {r['ranks']} rank(s)  eager {r['eager_s']:.3f} s  "
                      f"compiled {r['compiled_s']:.3f} s ({r['ratio']:.2f}x)  "
                      f"compile {r['compile_s']:.1f} s  cached {r['cached_compile_s']:.1f} s",
                      flush=True)  # fmt: skip
    head = "| variant | ranks | eager step (s) | compiled step (s) | ratio | compile (s) | cached compile (s) |"  # noqa: E501
    print("\n" + head + "\n|" + "---|" * 7)
    for r in rows:
        cells = (
            r["variant"],
            r["ranks"],
            f"{r['eager_s']:.3f}",
            f"{r['compiled_s']:.3f}",
            f"{r['ratio']:.2f}",
            f"{r['compile_s']:.1f}",
            f"{r['cached_compile_s']:.1f}",
        )
        print("| " + " | ".join(map(str, cells)) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
