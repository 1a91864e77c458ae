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
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Terminated, TrainingError
from ..trn2 import DEFAULT_LNC
from .rendezvous import check_endpoint_reachable_by_all, nodes_joined
from .spec import RunSpec


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
    rank_spec = spec.replace(
        nproc=1, nnodes=1, rdzv_endpoint=None, rdzv_timeout=RunSpec.rdzv_timeout
    )  # what torchrun tells each rank itself
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


#: a student's share of a trn2 used by a class (e.g. "8-15"), for runs that name none
CLASS_SLICE_ENV = "QWEN3_TRN_NEURON_CORES"


def with_class_slice(spec: RunSpec, environ: dict[str, str] | None = None) -> RunSpec:
    """``spec`` with ``neuron_cores`` taken from the student's slice, when it names none.

    A class sharing one trn2 gives each student a slice of NeuronCores once, in their
    environment (``QWEN3_TRN_NEURON_CORES=8-15``); every run the notebooks start (one
    rank, two ranks) then takes the first ``nproc`` cores of it, and a run that needs
    more ranks than the slice holds is refused before it starts, naming the slice.
    """
    environ = os.environ if environ is None else environ
    share = environ.get(CLASS_SLICE_ENV)
    if spec.neuron_cores is not None or not share:
        return spec
    from ..trn2 import core_slice

    try:
        cores = core_slice(share)
    except ValueError as e:
        raise ConfigError(f"{CLASS_SLICE_ENV}: {e}") from None
    if spec.nproc > len(cores):
        raise ConfigError(
            f"this run starts {spec.nproc} ranks but your share of the trn2 "
            f"({CLASS_SLICE_ENV}={share}) holds {len(cores)} NeuronCores: run it with "
            f"--nproc {len(cores)} or less, or on a trn2 of your own"
        )
    return spec.replace(neuron_cores=f"{cores.start}-{cores.start + spec.nproc - 1}").validate()


def one_process_share_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for one training process started without torchrun, in a student's share.

    torchtitan's own entry point run as a plain child (notebook 02) has no LOCAL_RANK
    for torch-neuronx to place it by, and the Neuron runtime would reserve every core
    it sees; with a share it gets the share's first core, as a one-rank launch does.
    """
    share = env.get(CLASS_SLICE_ENV)
    if not share:
        return env
    from ..trn2 import core_slice

    try:
        first = core_slice(share).start
    except ValueError as e:
        raise ConfigError(f"{CLASS_SLICE_ENV}: {e}") from None
    return {**env, "NEURON_RT_VISIBLE_CORES": str(first)}


def confine_rank_to_its_core(spec: RunSpec, environ: dict[str, str] | None = None) -> str:
    """In a rank torchrun started: ``NEURON_RT_VISIBLE_CORES`` = the slice's first + LOCAL_RANK.

    torchrun gives every rank the same environment, so a per-rank value can only be set
    inside the rank. The Neuron runtime reads the variable when it starts (the Neuron
    runtime configuration guide: each process reserves the cores it names), and
    torch-neuronx fills it with LOCAL_RANK only while it is unset; so this runs first
    thing in the rank, before torch (which autoloads torch-neuronx) is imported. With
    ``--neuron-cores 8-15`` rank i gets core 8 + i: the same one-core-per-rank layout
    torch-neuronx makes by default, moved to the class member's slice. Returns the core.
    """
    environ = os.environ if environ is None else environ
    from ..trn2 import rank_visible_core

    spec.core_slice()  # the slice must hold exactly this node's ranks
    core = rank_visible_core(spec.neuron_cores, int(environ.get("LOCAL_RANK", "0")))
    environ["NEURON_RT_VISIBLE_CORES"] = core
    return core


def neuron_rank_environment(env: dict[str, str], neuron_cores: str | None = None) -> dict[str, str]:
    """What every Neuron rank needs, for training launches and the smoke ladder alike.

    - The logical-core size is set explicitly: NKI kernels default to LNC 1 while the
      compiler defaults to LNC 2 (a compile error when they differ).
    - NEURON_RT_VISIBLE_CORES is removed: torch-neuronx gives each rank its own core
      (NEURON_RT_VISIBLE_CORES = LOCAL_RANK) when the process group starts, but only if
      the variable is unset; a value such as "0-63" inherited from a shell would give
      every rank all 64 cores and fail its one-device-per-process check. With
      ``neuron_cores`` (``--neuron-cores 8-15``) each rank sets its own core from its
      LOCAL_RANK (:func:`confine_rank_to_its_core`).
    """
    env = dict(env)
    env.setdefault("NEURON_LOGICAL_NC_CONFIG", str(DEFAULT_LNC))
    visible = env.pop("NEURON_RT_VISIBLE_CORES", None)
    if visible:
        where = (
            f"rank i takes core {neuron_cores.partition('-')[0]}+i of --neuron-cores {neuron_cores}"
            if neuron_cores
            else "torch-neuronx gives rank i core i itself (--neuron-cores FIRST-LAST "
            "confines a run to a slice)"
        )
        print(
            f"note: NEURON_RT_VISIBLE_CORES={visible} is not passed to the ranks; {where}",
            file=sys.stderr,
        )
    return env


def stop_process_group(
    proc: subprocess.Popen, grace_s: float = 30, first: signal.Signals = signal.SIGTERM
) -> None:
    """Stop a child started with ``start_new_session=True`` and everything it started.

    torchrun's workers (and the Neuron runtime's hold on their NeuronCores) outlive a
    kill of torchrun alone; signalling the whole process group ends them too. ``first``
    is the signal the ranks see (SIGINT after a Ctrl-C, so their run.json says
    "interrupted"), then SIGKILL for whatever is left after ``grace_s``.
    """
    if proc.poll() is not None:
        return
    for sig, wait_s in ((first, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def launch(
    spec: RunSpec,
    device_type: str,
    *,
    timeout: float | None = None,
    progress: bool = False,
    verbose: bool = False,
    label: str | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
):
    """Train ``spec`` on ``spec.nproc`` ranks in child processes; rank 0's RunResult.

    Each completed step reaches the progress bar and ``on_step`` as rank 0 writes it to
    metrics.jsonl, so the bar or the training panel updates live. Without ``out`` the
    run gets a new folder under ``runs/``.
    """
    from .train import new_out_dir, own_run_folder

    if device_type == "neuron":
        spec = with_class_slice(spec)
    multinode = spec.nnodes > 1
    if multinode:
        torchrun_command(spec)  # refuses a job without its endpoint
        check_endpoint_reachable_by_all(spec.rdzv_endpoint)
    out = new_out_dir(spec.out)
    # One node: this process writes the folder and holds it for the run's life. Several
    # nodes may share one folder: the job's rank 0 holds it (training/train.py).
    with nullcontext() if multinode else own_run_folder(out):
        return _launch_in(out, spec, device_type, timeout, progress, verbose, label, on_step)


def _launch_in(
    out: Path,
    spec: RunSpec,
    device_type: str,
    timeout: float | None,
    progress: bool,
    verbose: bool,
    label: str | None,
    on_step: Callable[[dict[str, Any]], None] | None,
):
    """:func:`launch`, once the run folder is settled."""
    from .metrics_file import keep_steps_before, read_metrics
    from .spec import plan_run
    from .train import RunResult, check_resume, prepare_out_dir, prepare_resume_dir, step_reporter

    multinode = spec.nnodes > 1
    if spec.resume:
        out, resumed_from = prepare_resume_dir(out)
        if not multinode:  # (several nodes: rank 0 does both, once, not every node)
            # refused before any file changes, rather than in rank 0 after the next line
            check_resume(out, resumed_from, plan_run(spec), share=None)  # (ranks hash)
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
        out, resumed_from = prepare_out_dir(out, spec.overwrite), 0
        child = spec.replace(out=str(out), overwrite=True)
    cmd = torchrun_command(child) + (["--verbose"] if verbose else [])
    desc = label or f"{spec.variant} x{spec.world}"
    step_done, close_bar = step_reporter(spec.steps, desc, progress, on_step, resumed_from)
    # one log per node: on shared storage the nodes' logs sit side by side
    node_log = f"launch-{socket.gethostname()}-{os.getpid()}.log"
    log_path = out / (node_log if multinode else "launch.log")
    with open(log_path, "w") as log:
        log.write(f"$ {shell_command(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            env=rank_environment(spec, device_type),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so that stop_process_group reaches every rank
        )
        last_step = resumed_from
        started = time.monotonic()
        joined, polled = None, 0.0
        try:
            while True:
                done = proc.poll() is not None
                if multinode and last_step == resumed_from and time.monotonic() - polled > 2:
                    joined, polled = nodes_joined(spec.rdzv_endpoint) or joined, time.monotonic()
                metrics = out / "metrics.jsonl"
                if metrics.exists():
                    for record in read_metrics(metrics):
                        if record["step"] > last_step:
                            step_done(record)
                            last_step = record["step"]
                if done:
                    break
                if timeout is not None and time.monotonic() - started > timeout:
                    raise TrainingError(f"{spec.world}-rank run passed {timeout:.0f} s; stopped")
                time.sleep(0.2)
        except BaseException as e:
            ctrl_c = isinstance(e, KeyboardInterrupt) and not isinstance(e, Terminated)
            stop_process_group(proc, first=signal.SIGINT if ctrl_c else signal.SIGTERM)
            raise
        finally:
            close_bar()
    if proc.returncode != 0:
        text = log_path.read_text()
        never_met = last_step == resumed_from  # (afterwards: a node left mid-run)
        if multinode and never_met and "RendezvousTimeoutError" in text:
            raise TrainingError(missing_nodes_message(spec, joined))
        if multinode and never_met and "RendezvousConnectionError" in text:
            raise TrainingError(missing_nodes_message(spec, None))
        lines = text.splitlines()
        ours = [ln.removeprefix("error: ") for ln in lines if ln.startswith("error: ")]
        if ours:  # a rank said what went wrong, in our words: pass it on as it is
            raise TrainingError(f"{ours[-1].strip()} (full log: {log_path})")
        errors = [ln for ln in lines if "Error" in ln]
        last = errors[-1].strip() if errors else f"exit status {proc.returncode}"
        raise TrainingError(f"{spec.world}-rank run failed: {last} (full log: {log_path})")
    if not (out / "run.json").exists():  # rank 0 ran on another node, without shared storage
        return RunResult(out=out, spec=spec, status="completed", writer=False)
    result = RunResult.from_folder(out)
    # the node whose torchrun started rank 0 writes the plot; the others only report
    result.writer = not multinode or result.agent == (socket.gethostname(), proc.pid)
    return result


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
