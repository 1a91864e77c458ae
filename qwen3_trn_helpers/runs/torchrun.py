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

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..errors import PEER_LOST, ConfigError, TrainingError
from ..training.metrics_file import read_metrics
from ..training.plan import Plan
from ..training.spec import RESUME_AUTO, RunSpec
from .child import run_child, stop_process_group
from .folder import Claim, RunResult, claim, prepare_out_dir
from .launch import rank_environment, shell_command, torchrun_command
from .lifeline import launcher_environment, watched
from .lost_rank import check_lost
from .neuron_cores import with_class_slice
from .rendezvous import JoinWatch, check_endpoint_reachable_by_all, launch_entry
from .reporter import Reporter

#: seconds a run that saves checkpoints gets, after SIGTERM, to finish its step and save
#: (the scheduler's own grace, Slurm's KillWait or a pod's terminationGracePeriodSeconds,
#: ends it earlier if shorter; torchrun gives its workers 30 s)
STOP_GRACE_S = 120


def run_with_torchrun(
    plan: Plan, reporter: Reporter | None = None, *, timeout: float | None = None
) -> RunResult:
    """Train a planned run on ``nproc`` ranks per node in child processes; rank 0's
    RunResult. (Each rank plans it again, in its own process, from the same spec.)

    Each completed step reaches the progress bar and ``on_step`` as rank 0 writes it to
    metrics.jsonl, so the bar or the training panel updates live. Without ``out`` the
    run gets a new folder under ``runs/``. Published weights are in the cache already
    (``run()`` turned them into a folder once); each rank finds them there.
    """
    reporter = reporter or Reporter(progress=False)
    spec = plan.spec
    multinode = plan.nnodes > 1
    if multinode:
        if spec.rdzv_endpoint is None:
            raise ConfigError(
                f"a job on {plan.nnodes} nodes needs --rdzv-endpoint HOST:PORT, the same on "
                "every node: an address of one of them (the first) that the others reach"
            )
        check_endpoint_reachable_by_all(spec.rdzv_endpoint)
    # a student's share of a trn2 shared by a class: the cores the ranks confine to
    cores = with_class_slice(spec).neuron_cores if plan.device.is_trn2 else None
    # the folder named, held on one node (several: the job's rank 0 holds it) and settled
    # before any rank starts (runs/folder.py)
    with claim(plan, launcher=True) as taken:
        if taken.settled.finished:
            return RunResult.from_folder(taken.out)  # a requeue or restart after the last step
        return _launch_in(taken, plan, reporter, timeout, cores)


def _launch_in(
    taken: Claim, plan: Plan, reporter: Reporter, timeout: float | None, cores: str | None
) -> RunResult:
    """:func:`run_with_torchrun`, once the run folder is claimed and settled."""
    spec, out = plan.spec, taken.out
    multinode = plan.nnodes > 1
    resumed_from = taken.settled.resumed_from
    rank_fields: dict[str, str] = {}
    if not multinode and not resumed_from:
        rank_fields = {"out": str(out)}  # cleared here, held here
        if spec.resume != RESUME_AUTO:  # (auto stays: ranks torchrun restarts continue)
            rank_fields["overwrite"] = ""
    if cores != spec.neuron_cores:
        rank_fields["neuron_cores"] = cores
    cmd = torchrun_command(plan, **rank_fields) + (["--verbose"] if reporter.verbose else [])
    if reporter.echo_launch:
        print(f"launching: {shell_command(cmd)}", flush=True)
    # torchrun under a watch of this process (runs/lifeline.py): killed, we take it along
    cmd = watched(cmd)
    desc = f"{plan.variant.name} x{plan.world_size}"
    step_done, close_bar = reporter.steps(spec.steps, desc, initial=resumed_from)
    # one log per node: on shared storage the nodes' logs sit side by side
    node_log = f"launch-{socket.gethostname()}-{os.getpid()}.log"
    log_path = out / (node_log if multinode else "launch.log")
    last_step = resumed_from
    # how many nodes came, for the message if they never all do (read in a child: a
    # service other than torchrun's store at the endpoint must not hang this loop), and
    # whether every node was started with this node's --nnodes and --nproc
    watch = (
        JoinWatch(spec.rdzv_endpoint, launch_entry(launch_settings(plan))) if multinode else None
    )

    met_by = time.monotonic() + spec.rdzv_timeout + RENDEZVOUS_SLACK_S
    met, looked = not multinode, 0.0

    def report_steps(proc: subprocess.Popen) -> None:
        nonlocal last_step, met, looked
        if watch is not None and watch.stop_for and proc.poll() is None:
            stop_process_group(proc, grace_s=10)  # every node finds it and stops
            raise ConfigError(watch.stop_for)
        if watch is not None and not met and time.monotonic() - looked > 2:
            # torchrun blocks past its join timeout when another service holds the port:
            # the launch gives it the timeout plus a start-up margin, then stops it
            met, looked = started_ranks(proc.pid), time.monotonic()
            late = time.monotonic() > met_by and watch.another_service
            if not met and late and proc.poll() is None:
                stop_process_group(proc, grace_s=3)  # it may sit in C++, deaf to SIGTERM
                raise TrainingError(rendezvous_failed(spec, watch.joined))
        report_steps_written(out / "metrics.jsonl")

    def report_steps_written(metrics: Path) -> None:
        nonlocal last_step
        if metrics.exists():
            for record in read_metrics(metrics):
                if record["step"] > last_step:
                    step_done(record)
                    last_step = record["step"]
                    if watch is not None:
                        watch.close()  # every node came

    env = launcher_environment(rank_environment(plan, cores))  # runs/lifeline.py
    agents: list[int] = []  # torchrun's pid, once it runs (run.json's agent on one node)

    def report_steps_of(proc: subprocess.Popen) -> None:
        if not agents or agents[-1] != proc.pid:
            agents.append(proc.pid)
        report_steps(proc)

    try:
        for attempt in range(1, PORT_CLASH_ATTEMPTS + 1):
            result = run_child(
                cmd, log=log_path, env=env, timeout=timeout,
                while_running=report_steps_of,
                # on SIGTERM the ranks save a checkpoint first (training/stopping.py)
                grace_s=STOP_GRACE_S if spec.checkpoint_interval else 30,
            )  # fmt: skip
            report_steps_written(out / "metrics.jsonl")  # steps written since the last look
            port = clashed_port(result.output) if not result.ok else None
            if port is None or multinode or last_step != resumed_from:
                break  # (several nodes: every node would have to start again; see below)
            if attempt < PORT_CLASH_ATTEMPTS:
                # one node: torchrun chose the port (--standalone), so another is as good
                print(
                    f"note: port {port}, which torchrun picked for the ranks' store, was "
                    "taken by another process as the ranks started (EADDRINUSE); launching "
                    f"again on another port (attempt {attempt + 1} of {PORT_CLASH_ATTEMPTS})",
                    file=sys.stderr, flush=True,
                )  # fmt: skip
                log_path.rename(log_path.with_name(f"{log_path.stem}.{attempt}{log_path.suffix}"))
                if not resumed_from:  # what the failed ranks wrote (run.json: failed) goes
                    prepare_out_dir(out, overwrite=True)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the ranks were stopped
        close_bar()
        stop.files_line = finalise_after_stop(out, stop, agents[-1] if agents else None)
        raise
    finally:
        close_bar()
        if watch is not None:
            watch.close()
    joined = watch.joined if watch is not None else None
    if result.timed_out:
        raise TrainingError(f"{plan.world_size}-rank run passed {timeout:.0f} s; stopped")
    if not result.ok and watch is not None and watch.mismatch:
        raise ConfigError(watch.mismatch)  # the other node stopped first
    if not result.ok and clashed_port(result.output) is not None and last_step == resumed_from:
        raise TrainingError(port_clash_message(spec, clashed_port(result.output), multinode))
    if not result.ok:
        text = result.output
        # (afterwards: a node left mid-run; ranks that started mean the nodes met)
        never_met = last_step == resumed_from and not met
        if multinode and never_met and "RendezvousTimeoutError" in text:
            # a join that timed out had reached the rendezvous: this node at least came
            # (the count read every second may have missed it on a busy machine)
            raise TrainingError(missing_nodes_message(spec, max(joined or 0, 1)))
        if multinode and never_met and "RendezvousConnectionError" in text:
            raise TrainingError(rendezvous_failed(spec, joined))
        if multinode and not never_met and "RendezvousConnectionError" in text:
            # the node that held the rendezvous store went away mid-run: this node's
            # torchrun loses the store before its rank notices the lost peer
            from ..training.spec import split_endpoint

            host = split_endpoint(spec.rdzv_endpoint)[0]
            holder = f"the first node ({host}, which holds the rendezvous store)"
            said = PEER_LOST.replace("(a node stopped, failed", f"({holder} stopped, failed")
            raise TrainingError(f"after step {last_step}: {said}")
        check_lost(out, text, result.returncode, result.pid)  # a rank a signal took: named
        result.check(f"{plan.world_size}-rank run")
    if not (out / "run.json").exists():  # rank 0 ran on another node, without shared storage
        return RunResult(out=out, spec=spec, status="completed", writer=False)
    run = RunResult.from_folder(out)
    # the node whose torchrun started rank 0 writes the plot; the others only report
    run.writer = not multinode or run.agent == (socket.gethostname(), result.pid)
    return run


def launch_settings(plan: Plan) -> dict[str, int]:
    """What torchrun takes and the ranks cannot compare among themselves: nodes started
    with another --nnodes never meet (or meet as a job of the other node's size); with
    another --max-restarts, the node that gives up first leaves the others waiting out
    the rendezvous timeout for a round it never joins; with another --rdzv-timeout the
    nodes disagree about how long a missing node is waited for."""
    return {
        "--nnodes": plan.nnodes,
        "--nproc": plan.nproc,
        "--max-restarts": plan.spec.max_restarts,
        "--rdzv-timeout": plan.spec.rdzv_timeout,
    }


#: seconds past --rdzv-timeout a launch waits for torchrun to start its ranks
RENDEZVOUS_SLACK_S = 15


def started_ranks(torchrun_pid: int) -> bool:
    """Whether torchrun has started its ranks (the nodes met): it has child processes.
    (``pgrep -P``: on Linux and macOS alike; without it, assume so.)"""
    try:
        found = subprocess.run(
            ["pgrep", "-P", str(torchrun_pid)], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return True
    return bool(found.stdout.strip())


def rendezvous_failed(spec: RunSpec, joined: int | None) -> str:
    """The nodes never met: another service at the endpoint, or nodes missing."""
    if joined is None and _answers(spec.rdzv_endpoint):
        return (
            f"something that is not torchrun's rendezvous answers at {spec.rdzv_endpoint} "
            f"(no node joined within {spec.rdzv_timeout} s): another service or a proxy "
            "holds that port; pick a free port on the first node for --rdzv-endpoint, the "
            "same on every node"
        )
    return missing_nodes_message(spec, joined)


def _answers(endpoint: str) -> bool:
    """Whether anything accepts a TCP connection at ``endpoint`` (a plain socket)."""
    from ..training.spec import split_endpoint

    host, port = split_endpoint(endpoint)
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


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


#: launches on one node that meet a port another process took as the ranks started
PORT_CLASH_ATTEMPTS = 3

#: torch's TCPStore server, when the port it was given is taken (torch 2.14, libuv
#: store: "The server socket has failed to listen on any local network address. port:
#: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use";
#: the older store: "... failed to bind to [::]:29500 (errno: 98 - Address already in
#: use)")
_CLASH = re.compile(
    r"port: (\d+), useIpv6: \w+, code: -?\d+, name: EADDRINUSE"
    r"|failed to bind to \S*:(\d+) \(errno: 98"
)


def clashed_port(output: str) -> int | None:
    """The port a rank's (or torchrun's) store could not listen on because another
    process held it, from the launch's output; None if no store met that.

    Why: torchrun (``--standalone``, or with a fresh store each round) picks rank 0's
    store port by binding a free port and closing it again; the rank binds it seconds
    later, and another job on the machine can take it in between.
    """
    found = _CLASH.search(output)
    return int(found.group(1) or found.group(2)) if found else None


def port_clash_message(spec: RunSpec, port: int, multinode: bool) -> str:
    """What a user reads when a store port was taken: which port, whose, the fix."""
    from ..training.spec import split_endpoint

    if multinode and spec.rdzv_endpoint and split_endpoint(spec.rdzv_endpoint)[1] == port:
        return (
            f"port {port} of --rdzv-endpoint {spec.rdzv_endpoint} is in use by another "
            "process on the first node (EADDRINUSE): pick a free port there (`ss -ltn` "
            "lists the taken ones), the same --rdzv-endpoint on every node"
        )
    if multinode:
        return (
            f"port {port}, which torchrun picked on the first node for the ranks' store, "
            "was taken by another process as the ranks started (EADDRINUSE); no step ran: "
            "start the job again (torchrun picks another port), or add --max-restarts 1 "
            "so that torchrun starts the ranks again on a new port by itself"
        )
    return (
        f"port {port}, which torchrun picked for the ranks' store, was taken by another "
        f"process as the ranks started, {PORT_CLASH_ATTEMPTS} launches in a row "
        "(EADDRINUSE); no step ran: another job on this machine is taking ports as fast "
        "as they free up; start again once it has settled"
    )


def finalise_after_stop(out: Path, stop: KeyboardInterrupt, agent: int | None) -> str:
    """After a stop: run.json finalised if the ranks could not do it; what the folder holds.

    A rank that gets SIGTERM inside a step (the first compiled step takes minutes on
    trn2) finishes the step before it stops; torchrun kills it 30 s after its own
    SIGTERM, before rank 0 records the stop, and run.json said ``running`` for good.
    This launch saw the stop, so it records it: ``terminated`` (SIGTERM) or
    ``interrupted`` (Ctrl-C), the steps metrics.jsonl holds, and why. Only the node
    whose torchrun started rank 0 does (``agent``: this node's torchrun pid); the line
    returned names what the folder holds, for the terminal.
    """
    from ..errors import Terminated
    from ..training.metrics_file import strict_json
    from .folder import latest_checkpoint_step

    metrics = out / "metrics.jsonl"
    try:
        steps = [r["step"] for r in read_metrics(metrics)] if metrics.exists() else []
    except (OSError, ValueError, KeyError):  # (a line the stop cut short: never a 2nd error)
        steps = []
    manifest = out / "run.json"
    try:
        info = json.loads(manifest.read_text())
    except (OSError, ValueError):
        info = None
    ours = isinstance(info, dict) and info.get("agent") in (None, [socket.gethostname(), agent])
    if ours and info.get("status") == "running":
        info["status"] = "terminated" if isinstance(stop, Terminated) else "interrupted"
        info["steps_completed"] = len(steps)
        info["stopped"] = (
            "the ranks were killed in a step, before they could record the stop "
            "(torchrun's 30 s grace ran out); recorded by the launch"
        )
        partial = manifest.with_name(".run.json.partial")
        partial.write_text(strict_json(info, indent=2))
        partial.replace(manifest)
    checkpoint = latest_checkpoint_step(out)
    saved = f"; checkpoint of step {checkpoint} saved" if checkpoint else ""
    if not steps:
        held = "no metrics.jsonl" if not metrics.exists() else "metrics.jsonl holds no step"
        return f"no step completed; {held}{saved}"
    if steps[0] == steps[-1]:
        return f"step {steps[0]} is in metrics.jsonl{saved}"
    return f"steps {steps[0]}-{steps[-1]} are in metrics.jsonl{saved}"
