"""Where a CPU training step's time goes: native through torchtitan against the plain loop.

    .venv/bin/python scripts/profile_steps.py [--steps 24] [--warmup 4]   (Linux perf)

bench_steps.py says how long a step takes; this says what it does. Each configuration
trains the tiny model in its own process under ``perf record`` (the Linux sampling
profiler: no instrumentation in the step, unlike torch.profiler, whose bookkeeping
changed what the step allocates). The process starts with perf's events off, turns them
on after the warm-up steps and off after the last one (perf's ``--control`` fifo), so
only steady steps are sampled. Samples are grouped by the kernel they land in (matmul,
casts and copies, log-softmax, the optimizer, OpenMP's wait, Python) and printed as CPU
milliseconds per step, side by side.

Both train with freed memory kept in the heap (training/host_memory.py), so what
differs is the step, not the allocator: native is torchtitan's Trainer with FSDP2 mixed
precision at one rank; the plain loop is bench_steps.py's (transformers, autocast,
torch's AdamW). Categories are read from symbol names; a kernel a future torch renames
lands in "other".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

CONFIGS = ("native", "plain loop")
HZ = 999  # perf's sampling frequency, per thread

#: (category, pattern over "dso symbol"); the first match wins
CATEGORIES = (
    ("matmul", r"^\[JIT\]|gemm|dnnl|mkl_blas"),
    ("OpenMP wait", r"^libgomp|^libiomp"),
    ("log-softmax, exp", r"softmax|Sleef|nll_loss"),
    ("casts and copies", r"copy"),
    ("zero fill", r"fill"),
    ("optimizer", r"adam|addcdiv|addcmul|lerp|[Ss]qrt"),
    ("grad norm", r"norm_kernel"),
    ("add, mul, div", r"add_kernel|mul_kernel|div_true"),
    ("Python", r"^libpython|^python"),
    ("malloc", r"^libc\.so.*(malloc|free|_int_)"),
    ("kernel (page faults, ...)", r"^\[kernel"),
)


def train_in_child(which: str, steps: int, warmup: int, ctl: str, ack: str) -> None:
    """Train ``which``; perf's events on from step ``warmup + 1`` to the last step."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    control, acks = open(ctl, "w", buffering=1), open(ack)  # noqa: SIM115 (held open)

    def perf(command: str) -> None:
        control.write(command + "\n")
        acks.readline()  # perf answers "ack" once the events are switched

    done = 0

    def on_step(_record: object = None) -> None:
        nonlocal done
        done += 1
        if done == warmup:
            perf("enable")
        elif done == steps:
            perf("disable")

    if which == "native":
        from qwen3_trn_helpers import run

        with tempfile.TemporaryDirectory() as tmp:
            result = run("native", steps=steps, out=tmp + "/run", progress=False,
                         on_step=on_step)  # fmt: skip
        times = [m["step_time_s"] for m in result.metrics]
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_steps import plain_loop_steps

        from qwen3_trn_helpers.training.host_memory import keep_freed_memory_while_training

        with keep_freed_memory_while_training(True):
            times = plain_loop_steps(steps, on_step=on_step)
    print(json.dumps({"ms_per_step": 1000 * statistics.median(times[warmup:])}))


def categories(perf_data: Path) -> Counter[str]:
    """Samples of ``perf_data`` by category."""
    report = subprocess.run(
        ["perf", "report", "-i", str(perf_data), "--no-children", "--sort", "dso,sym",
         "--stdio", "-g", "none", "-n"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    samples: Counter[str] = Counter()
    for line in report.splitlines():  # "  9.35%   1126  libgomp.so.1  [.] symbol"
        m = re.match(r"\s+[\d.]+%\s+(\d+)\s+(\[JIT\] tid \d+|\S+)\s+\[.\]\s+(.*)", line)
        if not m:
            continue
        where = f"{m[2]} {m[3]}"
        name = next((c for c, p in CATEGORIES if re.search(p, where)), "other")
        samples[name] += int(m[1])
    return samples


def profile(which: str, steps: int, warmup: int, folder: Path) -> tuple[float, Counter[str]]:
    """(ms per step, CPU ms per step by category) of one configuration."""
    ctl, ack, data = folder / f"{which}.ctl", folder / f"{which}.ack", folder / f"{which}.data"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    child = [sys.executable, __file__, "--child", which, "--steps", str(steps),
             "--warmup", str(warmup), "--ctl", str(ctl), "--ack", str(ack)]  # fmt: skip
    out = subprocess.run(
        ["perf", "record", "-F", str(HZ), "-D", "-1", "--control", f"fifo:{ctl},{ack}",
         "-o", str(data), "-q", "--", *child],
        capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode:
        sys.exit(f"{which}: perf record failed ({out.returncode}):\n{out.stderr[-2000:]}")
    step_ms = json.loads(out.stdout.strip().splitlines()[-1])["ms_per_step"]
    # each sample stands for 1/HZ s of one thread's CPU; the window held the steps
    # after the warm-up
    ms_per_sample = 1000 / HZ / (steps - warmup)
    cpu_ms = Counter({k: n * ms_per_sample for k, n in categories(data).items()})
    return step_ms, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--ctl", help=argparse.SUPPRESS)
    parser.add_argument("--ack", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 0 < args.warmup < args.steps:
        parser.error("--warmup must be at least 1 and below --steps")
    if args.child:
        return train_in_child(args.child, args.steps, args.warmup, args.ctl, args.ack)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for which in CONFIGS:
            results[which] = profile(which, args.steps, args.warmup, Path(tmp))
    names = sorted({k for _, c in results.values() for k in c},
                   key=lambda k: -results["native"][1][k])  # fmt: skip
    print(f"{'CPU ms per step':<28}" + "".join(f"{w:>12}" for w in CONFIGS))
    for name in names:
        print(f"{name:<28}" + "".join(f"{results[w][1][name]:12.1f}" for w in CONFIGS))
    print(f"{'step (wall ms, median)':<28}" + "".join(f"{results[w][0]:12.1f}" for w in CONFIGS))


if __name__ == "__main__":
    main()
