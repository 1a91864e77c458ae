"""Save time vs checkpoint size on this machine: torchtitan's checkpointer (ours, which
hashes shards as it writes them), synchronous vs asynchronous (``--checkpoint-async``).

    python scripts/bench_checkpoint.py --preset tiny --mode disabled async
    python scripts/bench_checkpoint.py --preset 0.6b --mode disabled

Each measurement builds the preset's trainer on one CPU rank, gives AdamW its state as
a trained step leaves it (zero gradients and one optimizer step create both moments,
without a step's compute), then times one save: ``blocked`` is how long training waits
(the whole save when synchronous; the staging copy when asynchronous), ``written``
until every file is on disk; CPU time is this process's (user + sys, every thread),
the figure to trust on a loaded machine. One JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(preset: str, mode: str, root: Path) -> dict:
    import torch

    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec
    from qwen3_trn_helpers.training.trainer import trainer_session

    out = root / f"{preset}-{mode}"
    spec = RunSpec(
        preset=preset, steps=2, checkpoint_interval=1, checkpoint_async=mode, out=str(out),
        device="cpu", skip_memory_check=True,
    )  # fmt: skip
    plan = plan_run(spec, device_type="cpu")
    with trainer_session(plan, out) as trainer:
        params = 0
        for part in trainer.model_parts:
            for p in part.parameters():
                p.grad = torch.zeros_like(p)
                params += p.numel()
        trainer.optimizers.step()
        trainer.optimizers.zero_grad(set_to_none=True)
        cpu0, wall0 = _cpu_s(), time.perf_counter()
        trainer.checkpointer.save(1)
        blocked = time.perf_counter() - wall0
        trainer.checkpointer.maybe_wait_for_saving()
        written, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
    step_dir = out / "checkpoint" / "step-1"
    nbytes = sum(f.stat().st_size for f in step_dir.iterdir() if f.is_file())
    shutil.rmtree(out, ignore_errors=True)
    return {
        "preset": preset,
        "mode": mode,
        "parameters": params,
        "checkpoint_mb": round(nbytes / 1e6, 1),
        "blocked_s": round(blocked, 2),
        "written_s": round(written, 2),
        "cpu_s": round(cpu, 2),
        "mb_per_cpu_s": round(nbytes / 1e6 / max(cpu, 1e-9), 1),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def measure_raw(parameters: int, mode: str, root: Path) -> dict:
    """The same save without building a model: fp32 weights and AdamW's two moments of
    ``parameters`` parameters as one state dict, written by our ShardWriter through
    ``dcp.save`` or ``dcp.async_save`` (a thread), on one process. For a machine too
    loaded, or too small, to build the preset (0.6B with AdamW is ~10 GiB before a save
    stages a second copy)."""
    import torch
    import torch.distributed.checkpoint as dcp

    from qwen3_trn_helpers.training.checkpoint import ShardWriter

    chunk = 4 * 2**20
    state = {
        f"{kind}.{i}": torch.randn(min(chunk, parameters - i * chunk))
        for kind in ("weight", "exp_avg", "exp_avg_sq")
        for i in range((parameters + chunk - 1) // chunk)
    }
    out = root / f"raw-{parameters}-{mode}"
    cpu0, wall0 = _cpu_s(), time.perf_counter()
    if mode == "async":
        future = dcp.async_save(state, storage_writer=ShardWriter(out))
        blocked = time.perf_counter() - wall0
        future.result()
    else:
        dcp.save(state, storage_writer=ShardWriter(out), no_dist=True)
        blocked = time.perf_counter() - wall0
    written, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
    nbytes = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    shutil.rmtree(out, ignore_errors=True)
    return {
        "parameters": parameters,
        "mode": mode,
        "checkpoint_mb": round(nbytes / 1e6, 1),
        "blocked_s": round(blocked, 2),
        "written_s": round(written, 2),
        "cpu_s": round(cpu, 2),
        "mb_per_cpu_s": round(nbytes / 1e6 / max(cpu, 1e-9), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--mode", nargs="+", default=["disabled", "async"])
    parser.add_argument("--dir", default=None, help="where the checkpoints go (default: /tmp)")
    parser.add_argument(
        "--raw", type=int, nargs="+", default=None, metavar="PARAMETERS",
        help="time saves of this many parameters' state without building a model",
    )  # fmt: skip
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = Path(args.dir or tempfile.mkdtemp(prefix="qwen3-trn-bench-ckpt-"))
    for mode in args.mode:
        for parameters in args.raw or []:
            print(json.dumps(measure_raw(parameters, mode, root)), flush=True)
        if args.raw is None:
            print(json.dumps(measure(args.preset, mode, root)), flush=True)


if __name__ == "__main__":
    main()
