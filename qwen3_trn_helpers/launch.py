"""Multi-rank runs through torchrun (PyTorch's own launcher), one rank per device.

On trn2 that is 64 ranks, one per logical NeuronCore (16 chips x 8 physical cores,
paired by LNC=2); on a CPU, a few gloo ranks that shard the model with FSDP exactly as
the NeuronCores do. Every rank runs the same ``qwen3-trn train`` command; torchtitan
reads the rendezvous variables torchrun sets and builds the device mesh.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from .errors import ConfigError, TrainingError

#: run() keyword -> CLI flag, for the arguments a launched run passes on.
_FLAGS = {
    "variant": "--variant",
    "preset": "--preset",
    "steps": "--steps",
    "local_batch_size": "--local-batch-size",
    "seq_len": "--seq-len",
    "init": "--init",
    "corpus": "--corpus",
    "tokenizer": "--tokenizer",
    "lr": "--lr",
    "seed": "--seed",
    "device": "--device",
    "moe_impl": "--moe-impl",
}


def train_argv(out: str | Path, **kwargs: Any) -> list[str]:
    """``qwen3-trn train`` arguments equivalent to ``run(**kwargs)``."""
    argv = ["--out", str(out), "--no-progress"]
    for key, value in kwargs.items():
        if key in ("overwrite", "tensorboard"):
            if value:
                argv.append(f"--{key}")
        elif key in _FLAGS:
            if value is not None:
                argv += [_FLAGS[key], str(value)]
        else:
            raise ConfigError(f"launch() does not pass on {key!r}")
    return argv


def torchrun_command(nproc: int, argv: list[str]) -> list[str]:
    """The exact command: torchrun (``python -m torch.distributed.run``) on one node."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "-m",
        "qwen3_trn_helpers",
        "train",
        *argv,
    ]


def shell_command(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def launch(nproc: int, out: str | Path, timeout: float | None = None, **kwargs: Any):
    """Run ``qwen3-trn train`` on ``nproc`` ranks and return rank 0's RunResult."""
    from .train import RunResult, RunSpec, prepare_out_dir

    if nproc < 1:
        raise ConfigError(f"nproc must be >= 1, got {nproc}")
    out = prepare_out_dir(out, kwargs.pop("overwrite", False))
    cmd = torchrun_command(nproc, train_argv(out, overwrite=True, **kwargs))
    env = dict(os.environ)
    if kwargs.get("device", "auto") in ("auto", "cpu"):
        # ranks share this machine's cores; without this each spawns a full thread pool
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    (out / "launch.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "error" in ln.lower()]
        last = errors[-1].strip() if errors else f"exit status {proc.returncode}"
        raise TrainingError(f"{nproc}-rank run failed: {last} (full log: {out}/launch.log)")
    from .metrics import read_metrics

    info = json.loads((out / "run.json").read_text())
    spec = RunSpec(**info["spec"])
    return RunResult(
        out=out,
        spec=spec,
        metrics=read_metrics(out / "metrics.jsonl"),
        status=info["status"],
        wall_s=info.get("wall_s", 0.0),
        flavor=info.get("flavor", ""),
    )
