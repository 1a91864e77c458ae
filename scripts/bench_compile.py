"""Eager vs ``--compile`` step time, side by side in one run, plus the compile's cost.

    .venv/bin/python scripts/bench_compile.py [--steps 14] [--nproc 1 2]
        [--variants native transformers_v5 nki_moe] [--cache DIR] [--json FILE]

For each rank count and variant (tiny presets, sequence length 256, local batch 1,
the embedded corpus, bf16 compute as `qwen3-trn train` defaults), three runs of
``qwen3-trn train``, each in a fresh process (dynamo's in-memory cache would otherwise
hide the compile):

- eager;
- compiled with an empty inductor cache (a temporary folder): the first step holds the
  compile ("compile" column: that step's time minus the eager median);
- compiled again with the cache the previous run filled ("cached compile": the same
  difference, now mostly loading compiled code).

``--cache DIR`` skips the empty-cache run: both compiled runs' places are taken by one
run with the inductor cache DIR (e.g. the package's, ``~/.cache/qwen3-trn/inductor``,
filled by earlier runs), for a quicker step-time comparison; "compile" is then blank.

Steady state is the median step time of steps 4..N (the first step compiles; nothing
recompiles later, the document count being symbolic from the start). "load" is the
machine's 1-minute load average before and after the row's runs: on a shared machine
the wall times mean little when it exceeds the core count. Not a test: numbers depend
on the machine and on what else runs on it.
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


def measure(variant: str, nproc: int, steps: int, root: Path, cache: Path | None) -> dict:
    """One table row: eager, then compiled (an empty cache, then its second run; or once
    with ``cache``)."""
    load = os.getloadavg()[0]
    fresh = cache is None
    cache = cache or root / f"inductor-{variant}-{nproc}"
    name = f"{variant}-{nproc}"
    eager = train(variant, nproc, steps, root / f"{name}-eager", False, cache)
    first = train(variant, nproc, steps, root / f"{name}-compiled", True, cache)
    again = train(variant, nproc, steps, root / f"{name}-cached", True, cache) if fresh else first
    e, c = statistics.median(eager[WARMUP:]), statistics.median(first[WARMUP:])
    return {
        "variant": variant,
        "ranks": nproc,
        "eager_s": round(e, 3),
        "compiled_s": round(c, 3),
        "ratio": round(c / e, 2),
        "compile_s": round(first[0] - e, 1) if fresh else None,
        "cached_compile_s": round(again[0] - e, 1),
        "load": [round(load, 1), round(os.getloadavg()[0], 1)],
        "steps_s": {"eager": eager, "compiled": first, "compiled_cached": again},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--variants", nargs="+", default=["native"])
    parser.add_argument("--cache", type=Path, help="compile once with this inductor cache")
    parser.add_argument("--json", help="also write every step time here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        for nproc in args.nproc:
            for variant in args.variants:
                rows.append(measure(variant, nproc, args.steps, Path(tmp), args.cache))
                r = rows[-1]
                print(f"{r['variant']:<16} {r['ranks']} rank(s)  eager {r['eager_s']:.3f} s  "
                      f"compiled {r['compiled_s']:.3f} s ({r['ratio']:.2f}x)  "
                      f"compile {r['compile_s']} s  cached {r['cached_compile_s']:.1f} s  "
                      f"load {r['load'][0]} -> {r['load'][1]}", flush=True)  # fmt: skip
    head = "| variant | ranks | eager step (s) | compiled step (s) | ratio | compile (s) | cached compile (s) | load |"  # noqa: E501
    print("\n" + head + "\n|" + "---|" * 8)
    for r in rows:
        cells = (
            r["variant"],
            r["ranks"],
            f"{r['eager_s']:.3f}",
            f"{r['compiled_s']:.3f}",
            f"{r['ratio']:.2f}",
            "" if r["compile_s"] is None else f"{r['compile_s']:.1f}",
            f"{r['cached_compile_s']:.1f}",
            f"{r['load'][0]} -> {r['load'][1]}",
        )
        print("| " + " | ".join(map(str, cells)) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
