"""Runs in other processes through torchrun (PyTorch's own launcher), one rank per device.

On trn2 that is 64 ranks, one per logical NeuronCore (16 chips x 8 physical cores,
paired by LNC=2); on a CPU, a few gloo ranks that shard the model with FSDP exactly as
the NeuronCores do. Every rank runs ``qwen3-trn train`` with the same spec
(``RunSpec.to_argv``); torchtitan reads the rendezvous variables torchrun sets and
builds the device mesh.

On trn2 even a one-rank run from a notebook goes through here: the Neuron runtime, once
started in a process, keeps its NeuronCores until that process exits, and a notebook
kernel lives for hours.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, TrainingError
from .spec import RunSpec


def torchrun_command(spec: RunSpec, python: str | None = None) -> list[str]:
    """The exact command: torchrun (``python -m torch.distributed.run``) on one node.

    The rank count is torchrun's ``--nproc-per-node``; each rank reads it back from
    WORLD_SIZE. (Passing ``--nproc`` on would not even parse: torchrun's argparse takes
    it for an abbreviation of its own ``--nproc-per-node``.)
    """
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={spec.nproc}",
        "-m",
        "qwen3_trn_helpers",
        "train",
        "--no-progress",
        *spec.replace(nproc=1).to_argv(),
    ]


def shell_command(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def rank_environment(spec: RunSpec, device_type: str) -> dict[str, str]:
    """The environment every rank gets: this one, plus what the device needs.

    CPU ranks share the machine's cores: without a limit each would start a full
    thread pool. On trn2 the logical-core size is set explicitly, because NKI kernels
    default to LNC 1 while the compiler defaults to LNC 2 (a compile error when they
    differ); torch-neuronx itself gives each rank its core (NEURON_RT_VISIBLE_CORES =
    LOCAL_RANK) when the process group starts.
    """
    env = dict(os.environ)
    if device_type == "cpu":
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // spec.nproc)))
    if device_type == "neuron":
        env.setdefault("NEURON_LOGICAL_NC_CONFIG", "2")
    return env


def launch(
    spec: RunSpec,
    device_type: str,
    *,
    timeout: float | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
):
    """Train ``spec`` on ``spec.nproc`` ranks in child processes; rank 0's RunResult.

    Each completed step reaches ``on_step`` as rank 0 writes it to metrics.jsonl, so a
    progress bar or the training panel updates live.
    """
    from .metrics import read_metrics
    from .train import RunResult, prepare_out_dir

    if spec.out is None:
        raise ConfigError("a launched run needs out: the folder every rank writes to")
    out = prepare_out_dir(spec.out, spec.overwrite) if not spec.resume else Path(spec.out)
    child = spec.replace(out=str(out), overwrite=True) if not spec.resume else spec
    cmd = torchrun_command(child)
    log_path = out / "launch.log"
    with open(log_path, "w") as log:
        log.write(f"$ {shell_command(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, env=rank_environment(spec, device_type), stdout=log, stderr=subprocess.STDOUT
        )
        seen = 0
        started = time.monotonic()
        try:
            while True:
                done = proc.poll() is not None
                metrics = out / "metrics.jsonl"
                if metrics.exists() and on_step is not None:
                    records = read_metrics(metrics)
                    for record in records[seen:]:
                        on_step(record)
                    seen = max(seen, len(records))
                if done:
                    break
                if timeout is not None and time.monotonic() - started > timeout:
                    proc.kill()
                    raise TrainingError(f"{spec.nproc}-rank run passed {timeout:.0f} s; stopped")
                time.sleep(0.2)
        except BaseException:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
            raise
    if proc.returncode != 0:
        lines = log_path.read_text().splitlines()
        errors = [ln for ln in lines if ln.startswith("error:") or "Error" in ln]
        last = errors[-1].strip() if errors else f"exit status {proc.returncode}"
        raise TrainingError(f"{spec.nproc}-rank run failed: {last} (full log: {log_path})")
    return RunResult.from_folder(out)
