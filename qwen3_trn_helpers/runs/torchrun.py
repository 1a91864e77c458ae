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
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import ConfigError, TrainingError
from ..training.metrics_file import keep_steps_before, read_metrics
from ..training.spec import RESUME_AUTO, Plan, RunSpec
from .child import run_child
from .folder import (
    RunResult,
    already_trained,
    check_resume,
    fresh_overwrite,
    new_out_dir,
    own_run_folder,
    prepare_out_dir,
    prepare_resume_dir,
    resumes,
    step_reporter,
)
from .neuron_cores import neuron_rank_environment, with_class_slice
from .rendezvous import check_endpoint_reachable_by_all, nodes_joined


def torchrun_command(spec: RunSpec, python: str | None = None) -> list[str]:
    """The exact command: torchrun (``python -m torch.distributed.run``) for this node.

    One node: torchrun's ``--standalone``. Several: its c10d rendezvous at
    ``rdzv_endpoint``, the same command on every node, which torchrun numbers as they
    join. The rank counts are torchrun's; each rank reads them back from WORLD_SIZE and
    LOCAL_WORLD_SIZE. (Passing ``--nproc`` on would not even parse: torchrun's argparse
    takes it for an abbreviation of its own ``--nproc-per-node``.)
    """
    if spec.nnodes > 1:
        if spec.rdzv_endpoint is None:
            raise ConfigError(
                f"a job on {spec.nnodes} nodes needs --rdzv-endpoint HOST:PORT, the same on "
                "every node: an address of one of them (the first) that the others reach"
            )
        where = [
            f"--nnodes={spec.nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={spec.rdzv_endpoint}",
            f"--rdzv-conf=join_timeout={spec.rdzv_timeout}",
        ]
    else:
        where = ["--standalone", "--nnodes=1"]
    if spec.max_restarts:
        where.append(f"--max-restarts={spec.max_restarts}")
    # what torchrun tells each rank itself
    rank_spec = spec.replace(
        nproc=1, nnodes=1, rdzv_endpoint=None, rdzv_timeout=RunSpec.rdzv_timeout,
        max_restarts=0,
    )  # fmt: skip
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        f"--nproc-per-node={spec.nproc}",
        "-m",
        "qwen3_trn_helpers",
        "train",
        "--no-progress",
        *rank_spec.to_argv(),
    ]


#: seconds a run that saves checkpoints gets, after SIGTERM, to finish its step and save
#: (the scheduler's own grace, Slurm's KillWait or a pod's terminationGracePeriodSeconds,
#: ends it earlier if shorter; torchrun gives its workers 30 s)
STOP_GRACE_S = 120

shell_command = shlex.join  # the command as one line a shell runs as it is


def rank_environment(spec: RunSpec, device_type: str) -> dict[str, str]:
    """The environment every rank gets: this one, plus what the device needs.

    CPU ranks share the machine's cores: without a limit each would start a full
    thread pool. On trn2, see :func:`neuron_rank_environment`.
    """
    env = dict(os.environ)
    if device_type == "cpu":
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // spec.nproc)))
    if device_type == "neuron":
        env = neuron_rank_environment(env, spec.neuron_cores)
    return env


def run_with_torchrun(
    plan: Plan,
    *,
    timeout: float | None = None,
    progress: bool = False,
    verbose: bool = False,
    label: str | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
):
    """Train a planned run on ``nproc`` ranks per node in child processes; rank 0's
    RunResult. (Each rank plans it again, in its own process, from the same spec.)

    Each completed step reaches the progress bar and ``on_step`` as rank 0 writes it to
    metrics.jsonl, so the bar or the training panel updates live. Without ``out`` the
    run gets a new folder under ``runs/``.
    """
    spec, device_type = plan.spec, plan.device_type
    if device_type == "neuron":
        spec = with_class_slice(spec)
    multinode = spec.nnodes > 1
    if multinode:
        torchrun_command(spec)  # refuses a job without its endpoint
        check_endpoint_reachable_by_all(spec.rdzv_endpoint)
    out = new_out_dir(spec.out)
    # One node: this process writes the folder and holds it for the run's life. Several
    # nodes may share one folder: the job's rank 0 holds it (runs/here.py).
    with nullcontext() if multinode else own_run_folder(out):
        return _launch_in(out, plan, spec, timeout, progress, verbose, label, on_step)


def _launch_in(
    out: Path,
    plan: Plan,
    spec: RunSpec,
    timeout: float | None,
    progress: bool,
    verbose: bool,
    label: str | None,
    on_step: Callable[[dict[str, Any]], None] | None,
):
    """:func:`run_with_torchrun`, once the run folder is settled."""
    multinode = spec.nnodes > 1
    if not multinode and already_trained(spec, out):
        return RunResult.from_folder(out)  # a requeue or restart after the last step
    if resumes(spec, out):
        out, resumed_from = prepare_resume_dir(out)
        if not multinode:  # (several nodes: rank 0 does both, once, not every node)
            # refused before any file changes, rather than in rank 0 after the next line
            check_resume(out, resumed_from, plan, share=None)  # (the ranks hash)
            # rank 0 drops the steps it trains again only when it logs its first one;
            # drop them now, so that this loop never reports the later steps
            keep_steps_before(out / "metrics.jsonl", resumed_from + 1)
        child = spec
    elif multinode:
        # Every node may be given the same folder on shared storage: the job's rank 0
        # alone decides whether it may be used (and clears it for --overwrite), so no
        # node refuses a folder because another node of this job got there first.
        resumed_from, child = 0, spec
        out.mkdir(parents=True, exist_ok=True)
    else:
        out, resumed_from = prepare_out_dir(out, fresh_overwrite(spec)), 0
        # (--resume auto stays: ranks that torchrun restarts continue from a checkpoint)
        child = spec.replace(out=str(out), overwrite=spec.resume != RESUME_AUTO)
    cmd = torchrun_command(child) + (["--verbose"] if verbose else [])
    desc = label or f"{spec.variant} x{spec.world}"
    step_done, close_bar = step_reporter(spec.steps, desc, progress, on_step, resumed_from)
    # one log per node: on shared storage the nodes' logs sit side by side
    node_log = f"launch-{socket.gethostname()}-{os.getpid()}.log"
    log_path = out / (node_log if multinode else "launch.log")
    last_step = resumed_from
    joined, polled = None, 0.0

    def report_steps(proc: subprocess.Popen) -> None:
        nonlocal last_step, joined, polled
        if multinode and last_step == resumed_from and time.monotonic() - polled > 2:
            joined, polled = nodes_joined(spec.rdzv_endpoint) or joined, time.monotonic()
        metrics = out / "metrics.jsonl"
        if metrics.exists():
            for record in read_metrics(metrics):
                if record["step"] > last_step:
                    step_done(record)
                    last_step = record["step"]

    try:
        result = run_child(
            cmd, log=log_path, env=rank_environment(spec, plan.device_type), timeout=timeout,
            while_running=report_steps,
            # on SIGTERM the ranks save a checkpoint first (training/stopping.py)
            grace_s=STOP_GRACE_S if spec.checkpoint_interval else 30,
        )  # fmt: skip
    finally:
        close_bar()
    if result.timed_out:
        raise TrainingError(f"{spec.world}-rank run passed {timeout:.0f} s; stopped")
    if not result.ok:
        text = result.output
        never_met = last_step == resumed_from  # (afterwards: a node left mid-run)
        if multinode and never_met and "RendezvousTimeoutError" in text:
            raise TrainingError(missing_nodes_message(spec, joined))
        if multinode and never_met and "RendezvousConnectionError" in text:
            raise TrainingError(missing_nodes_message(spec, None))
        result.check(f"{spec.world}-rank run")
    if not (out / "run.json").exists():  # rank 0 ran on another node, without shared storage
        return RunResult(out=out, spec=spec, status="completed", writer=False)
    run = RunResult.from_folder(out)
    # the node whose torchrun started rank 0 writes the plot; the others only report
    run.writer = not multinode or run.agent == (socket.gethostname(), result.pid)
    return run


def missing_nodes_message(spec: RunSpec, joined: int | None) -> str:
    """What a user reads when the nodes never all met: where, how many came, the fix."""
    seen = (
        f"nothing answered at {spec.rdzv_endpoint}"
        if not joined
        else f"{joined} of {spec.nnodes} nodes joined"
    )
    return (
        f"the job's {spec.nnodes} nodes did not all join the rendezvous at "
        f"{spec.rdzv_endpoint} within {spec.rdzv_timeout} s ({seen}): start the same "
        "command on every node, check that each reaches that address and port (a "
        "firewall or security group may block it), or raise --rdzv-timeout"
    )
