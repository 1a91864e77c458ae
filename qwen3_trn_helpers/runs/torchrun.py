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
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import PEER_LOST, ConfigError, Interrupted, Terminated, TrainingError
from ..training.metrics_file import read_metrics
from ..training.plan import Plan
from ..training.spec import RESUME_AUTO, RunSpec
from ..training.watchdog import watchdog_stop
from .child import ChildResult, run_child, stop_process_group
from .folder import Claim, RunResult, claim, latest_checkpoint_step, prepare_out_dir
from .launch import rank_environment, shell_command, torchrun_command
from .lifeline import launcher_environment, watched
from .manifest import record_failure, record_stop
from .rendezvous import (
    JoinWatch,
    check_endpoint_reachable_by_all,
    hosts_store_here,
    launch_entry,
    wait_for_store,
)
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
    (``run()`` turned them into a folder once); each rank finds them there. What the
    plan decided (the endpoint a job of several nodes needs, the NeuronCores of a
    class's share: ``Plan.neuron_cores``) is taken as it is.
    """
    reporter = reporter or Reporter(progress=False)
    if plan.nnodes > 1:  # (planning refused a job without one: plan_steps.check_launch)
        check_endpoint_reachable_by_all(plan.spec.rdzv_endpoint)
        if not hosts_store_here(plan.spec.rdzv_endpoint):  # a client of the host's store
            wait_for_store(plan.spec.rdzv_endpoint, plan.spec.rdzv_timeout)
    # the folder named, held on one node (several: the job's rank 0 holds it) and settled
    # before any rank starts (runs/folder.py)
    with claim(plan, launcher=True) as taken:
        if taken.settled.finished:
            return RunResult.from_folder(taken.out)  # a requeue or restart after the last step
        return _launch_in(taken, plan, reporter, timeout)


def _launch_in(taken: Claim, plan: Plan, reporter: Reporter, timeout: float | None) -> RunResult:
    """:func:`run_with_torchrun`, once the run folder is claimed and settled: torchrun
    run under a watch of its steps and of the nodes meeting; a stop recorded; a failure
    said in one line; rank 0's result read from the folder."""
    out, resumed_from = taken.out, taken.settled.resumed_from
    cmd = launch_command(plan, taken, reporter)
    desc = f"{plan.variant.name} x{plan.world_size}"
    step_done, close_bar = reporter.steps(plan.spec.steps, desc, initial=resumed_from)
    follower = LaunchFollower(plan, out, step_done, resumed_from)
    try:
        result = _run_torchrun(cmd, plan, taken, follower, timeout)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the ranks were stopped
        close_bar()
        held = finalise_after_stop(out, stop, follower.agent)
        kind = Terminated if isinstance(stop, Terminated) else Interrupted
        raise kind(*stop.args, held=held).with_traceback(stop.__traceback__) from None
    finally:
        close_bar()
        follower.close()
    check_outcome(result, plan, follower, timeout)
    if not (out / "run.json").exists():  # rank 0 ran on another node, without shared storage
        return RunResult(out=out, spec=plan.spec, status="completed", writer=False)
    run = RunResult.from_folder(out)
    # the node whose torchrun started rank 0 writes the plot; the others only report
    run.writer = plan.nnodes == 1 or run.agent == (socket.gethostname(), result.pid)
    return run


def launch_command(plan: Plan, taken: Claim, reporter: Reporter) -> list[str]:
    """torchrun's command line for this launch, under a watch of this process (killed,
    it takes torchrun along: runs/lifeline.py). Every rank runs ``qwen3-trn train`` with
    the plan's spec, plus the folder this launch settled (one node, a fresh run) and the
    NeuronCores the plan took from a class's share."""
    spec = plan.spec
    rank_fields: dict[str, str] = {}
    if plan.nnodes == 1 and not taken.settled.resumed_from:
        rank_fields = {"out": str(taken.out)}  # cleared here, held here
        if spec.resume != RESUME_AUTO:  # (auto stays: ranks torchrun restarts continue)
            rank_fields["overwrite"] = ""
    if plan.neuron_cores is not None and plan.neuron_cores != spec.neuron_cores:
        rank_fields["neuron_cores"] = plan.neuron_cores
    cmd = torchrun_command(plan, **rank_fields) + (["--verbose"] if reporter.verbose else [])
    if reporter.echo_launch:
        print(f"launching: {shell_command(cmd)}", flush=True)
    return watched(cmd)


class LaunchFollower:
    """What a launch watches while torchrun runs (``run_child`` calls it about every
    0.2 s): the steps rank 0 writes to metrics.jsonl, each to the bar or panel as it
    lands; torchrun's pid; and, on several nodes, how many met and whether each was
    started with this node's settings (:class:`~.rendezvous.JoinWatch`)."""

    def __init__(
        self,
        plan: Plan,
        out: Path,
        step_done: Callable[[dict[str, Any]], None],
        resumed_from: int,
    ) -> None:
        spec, multinode = plan.spec, plan.nnodes > 1
        self.spec, self.metrics, self.step_done = spec, out / "metrics.jsonl", step_done
        self.out = out
        # when torchrun started (the messages say the seconds measured; the watchdog's
        # stacks are this launch's when written since)
        self.launched_at, self.launched_wall = time.monotonic(), time.time()
        self.resumed_from = self.last_step = resumed_from
        self.agents: list[int] = []  # torchrun's pid, once it runs (run.json's agent on one node)
        # how many nodes came, for the message if they never all do (read in a child: a
        # service other than torchrun's store at the endpoint must not hang this loop), and
        # whether every node was started with this node's --nnodes and --nproc
        self.watch = (
            JoinWatch(spec.rdzv_endpoint, launch_entry(launch_settings(plan)))
            if multinode
            else None
        )
        self.met_by = self.launched_at + spec.rdzv_timeout + RENDEZVOUS_SLACK_S
        self.met, self.looked = not multinode, 0.0

    @property
    def agent(self) -> int | None:
        """This node's torchrun pid (the last one started), None before it runs."""
        return self.agents[-1] if self.agents else None

    @property
    def stepped(self) -> bool:
        """Whether a step was trained since the launch (a failure after that is no
        rendezvous's or port's)."""
        return self.last_step != self.resumed_from

    def __call__(self, proc: subprocess.Popen) -> None:
        if not self.agents or self.agents[-1] != proc.pid:
            self.agents.append(proc.pid)
        if self.watch is not None:
            self._watch_nodes(proc, self.watch)
        self.report_written()

    def _watch_nodes(self, proc: subprocess.Popen, watch: JoinWatch) -> None:
        if watch.stop_for and proc.poll() is None:
            stop_process_group(proc, grace_s=10)  # every node finds it and stops
            raise ConfigError(watch.stop_for)
        if not self.met and time.monotonic() - self.looked > 2:
            # torchrun blocks past its join timeout when another service holds the port:
            # the launch gives it the timeout plus a start-up margin, then stops it
            self.met, self.looked = started_ranks(proc.pid), time.monotonic()
            late = time.monotonic() > self.met_by and watch.another_service
            if not self.met and late and proc.poll() is None:
                stop_process_group(proc, grace_s=3)  # it may sit in C++, deaf to SIGTERM
                waited = time.monotonic() - self.launched_at
                raise TrainingError(rendezvous_failed(self.spec, watch.joined, waited))

    def report_written(self) -> None:
        """Every step written to metrics.jsonl since the last look, to ``step_done``."""
        if self.metrics.exists():
            for record in read_metrics(self.metrics):
                if record["step"] > self.last_step:
                    self.step_done(record)
                    self.last_step = record["step"]
                    if self.watch is not None:
                        self.watch.close()  # every node came

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()


def _run_torchrun(
    cmd: list[str], plan: Plan, taken: Claim, follower: LaunchFollower, timeout: float | None
) -> ChildResult:
    """torchrun to its end, its output in this node's log; on one node launched again
    while another process takes the port torchrun picked for the ranks' store before a
    step ran (:data:`PORT_CLASH_ATTEMPTS` in all)."""
    out, resumed_from, multinode = taken.out, taken.settled.resumed_from, plan.nnodes > 1
    # one log per node: on shared storage the nodes' logs sit side by side
    node_log = f"launch-{socket.gethostname()}-{os.getpid()}.log"
    log_path = out / (node_log if multinode else "launch.log")
    env = launcher_environment(rank_environment(plan, plan.neuron_cores))  # runs/lifeline.py
    for attempt in range(1, PORT_CLASH_ATTEMPTS + 1):
        result = run_child(
            cmd, log=log_path, env=env, timeout=timeout, while_running=follower,
            # on SIGTERM the ranks save a checkpoint first (training/stopping.py)
            grace_s=STOP_GRACE_S if plan.spec.checkpoint_interval else 30,
        )  # fmt: skip
        follower.report_written()  # steps written since the last look
        port = clashed_port(result.output) if not result.ok else None
        if port is None or multinode or follower.stepped:
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
    return result


def check_outcome(
    result: ChildResult, plan: Plan, follower: LaunchFollower, timeout: float | None
) -> None:
    """A launch that did not succeed, said in one line: its timeout; nodes started with
    other settings; a store port another process took; nodes that never met, or the
    first node lost mid-run; else the ranks' own error."""
    spec, multinode, watch = plan.spec, plan.nnodes > 1, follower.watch
    if result.timed_out:
        raise TrainingError(f"{plan.world_size}-rank run passed {timeout:.0f} s; stopped")
    if result.ok:
        return
    hung = watchdog_stop(follower.out, since=follower.launched_wall)
    if hung is not None:  # a step outlasted --hang-timeout (training/watchdog.py)
        record_failure(follower.out, hung, follower.agent)
        raise TrainingError(hung)
    if watch is not None and watch.mismatch:
        raise ConfigError(watch.mismatch)  # the other node stopped first
    port = clashed_port(result.output)
    if port is not None and not follower.stepped:
        raise TrainingError(port_clash_message(spec, port, multinode))
    text = result.output
    joined = watch.joined if watch is not None else None
    # (afterwards: a node left mid-run; ranks that started mean the nodes met)
    never_met = not follower.stepped and not follower.met
    waited = time.monotonic() - follower.launched_at
    if multinode and never_met and "RendezvousTimeoutError" in text:
        # a join that timed out had reached the rendezvous: this node at least came
        # (the count read every second may have missed it on a busy machine)
        raise TrainingError(missing_nodes_message(spec, max(joined or 0, 1), waited))
    if multinode and never_met and "RendezvousConnectionError" in text:
        raise TrainingError(rendezvous_failed(spec, joined, waited))
    if multinode and not never_met and "RendezvousConnectionError" in text:
        # the node that held the rendezvous store went away mid-run: this node's
        # torchrun loses the store before its rank notices the lost peer
        from ..training.spec import split_endpoint

        host = split_endpoint(spec.rdzv_endpoint)[0]
        holder = f"the first node ({host}, which holds the rendezvous store)"
        said = PEER_LOST.replace("(a node stopped, failed", f"({holder} stopped, failed")
        raise TrainingError(f"after step {follower.last_step}: {said}")
    result.check(f"{plan.world_size}-rank run")


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


def rendezvous_failed(spec: RunSpec, joined: int | None, waited_s: float) -> str:
    """The nodes never met: another service at the endpoint, or nodes missing
    (``waited_s``: how long this node's torchrun ran)."""
    if joined is None and _answers(spec.rdzv_endpoint):
        return (
            f"something that is not torchrun's rendezvous answers at {spec.rdzv_endpoint} "
            f"(no node joined in {waited_s:.0f} s): another service or a proxy "
            "holds that port; pick a free port on the first node for --rdzv-endpoint, the "
            "same on every node"
        )
    return missing_nodes_message(spec, joined, waited_s)


def _answers(endpoint: str) -> bool:
    """Whether anything accepts a TCP connection at ``endpoint`` (a plain socket)."""
    from ..training.spec import split_endpoint

    host, port = split_endpoint(endpoint)
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def missing_nodes_message(spec: RunSpec, joined: int | None, waited_s: float) -> str:
    """What a user reads when the nodes never all met: where, how many came, after how
    long (``waited_s``, measured: torchrun may give up before --rdzv-timeout), the fix."""
    seen = (
        f"nothing answered at {spec.rdzv_endpoint}"
        if not joined
        else f"{joined} of {spec.nnodes} nodes joined"
    )
    return (
        f"the job's {spec.nnodes} nodes did not all join the rendezvous at "
        f"{spec.rdzv_endpoint} in {waited_s:.0f} s (--rdzv-timeout {spec.rdzv_timeout}; "
        f"{seen}): start the same "
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
    This launch saw the stop, so run.json records it (runs/manifest.py ``record_stop``):
    ``terminated`` (SIGTERM) or ``interrupted`` (Ctrl-C), the steps metrics.jsonl holds,
    and why. Only the node whose torchrun started rank 0 does (``agent``: this node's
    torchrun pid); the line returned names what the folder holds, for the terminal.
    """
    metrics = out / "metrics.jsonl"
    try:
        steps = [r["step"] for r in read_metrics(metrics)] if metrics.exists() else []
    except (OSError, ValueError, KeyError):  # (a line the stop cut short: never a 2nd error)
        steps = []
    status = "terminated" if isinstance(stop, Terminated) else "interrupted"
    record_stop(out, status, len(steps), agent)
    checkpoint = latest_checkpoint_step(out)
    saved = f"; checkpoint of step {checkpoint} saved" if checkpoint else ""
    if not steps:
        held = "no metrics.jsonl" if not metrics.exists() else "metrics.jsonl holds no step"
        return f"no step completed; {held}{saved}"
    if steps[0] == steps[-1]:
        return f"step {steps[0]} is in metrics.jsonl{saved}"
    return f"steps {steps[0]}-{steps[-1]} are in metrics.jsonl{saved}"
