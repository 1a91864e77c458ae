"""A rank (or the torchrun that ran it) lost to a signal from outside: named, the same on
the terminal and in run.json.

When one process of a launched run is killed or stopped while the command that launched
it was not, the run's other processes each saw a consequence: rank 0's save failed
("Free disk space"), a collective timed out after 100000 ms, or a C++ frame from gloo
was the last line with "Error" in it; and the terminal said ``failed`` while run.json
said ``terminated``. torchrun's agent knows better: it reports each worker that ended
with the worker's rank, host, pid and exit code, a negative one for a signal (torch's
``ChildFailedError`` table, ``torch/distributed/elastic/multiprocessing/errors``). Our
CLI ends with 143 on SIGTERM and 130 on SIGINT (runs/arguments.py), so a rank that
handled the signal is known too, and says so itself (:func:`say_received`: ranks that
agree to stop all end with 143). A stopped rank ends nothing: the rank that waited for it
in a collective names it (training/ranks.py ``stopped_ranks``). From those,
:func:`check_lost` names the process, its node and the signal, and :func:`record_lost`
writes the same into run.json.
"""

from __future__ import annotations

import json
import re
import signal
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: one worker's entry in torchrun's failure table (torch 2.14: _FAILURE_FORMAT_TEMPLATE)
_FAILURE = re.compile(
    r"time\s*:\s*(?P<time>\S+)\s*\n\s*host\s*:\s*\S+\s*\n"
    r"\s*rank\s*:\s*(?P<rank>\d+) \(local_rank: \d+\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)"
)
#: our CLI's exit statuses for a stop it handled (runs/arguments.py)
_HANDLED = {143: signal.SIGTERM, 130: signal.SIGINT}


@dataclass(frozen=True)
class LostRank:
    """A process of the run that a signal ended or stopped."""

    rank: int | None  # None: torchrun itself (the agent that ran this node's ranks)
    node: str
    pid: int
    signal: str  # "SIGKILL", "SIGTERM", "SIGSTOP", ...
    handled: bool = False  # it ended through our own stop (exit 143 / 130), not killed

    @property
    def who(self) -> str:
        what = f"rank {self.rank}" if self.rank is not None else "torchrun"
        return f"{what} (pid {self.pid} on {self.node})"

    @property
    def status(self) -> str:
        """run.json's status: a handled stop is the run's stop; anything else failed it."""
        if not self.handled:
            return "failed"
        return "terminated" if self.signal == "SIGTERM" else "interrupted"

    def message(self) -> str:
        """What happened, in a line (the terminal's and run.json's)."""
        if self.handled:
            return (
                f"{self.who} was sent {self.signal} from outside this command and stopped the run"
            )
        if self.signal == "SIGSTOP":
            return (
                f"{self.who} was stopped ({self.signal}: kill -STOP, or a debugger or Ctrl-Z "
                "there) and the other ranks gave up waiting for it in a collective"
            )
        if self.rank is None:
            return (
                f"{self.who}, which ran this node's ranks, was killed by {self.signal}; its "
                "ranks stopped with it"
            )
        cause = (
            " (kill -9, or the out-of-memory killer: see `dmesg`)"
            if self.signal == "SIGKILL"
            else ""
        )
        return f"{self.who} was killed by {self.signal}{cause}; the other ranks stopped"

    def record(self) -> dict[str, Any]:
        """run.json's ``lost_rank``."""
        return asdict(self)


def lost_rank(output: str, returncode: int | None, agent_pid: int) -> LostRank | None:
    """The process a signal took from a launch that did not succeed, from torchrun's
    output and exit status; None where the ranks ended by their own errors.

    torchrun names the first failure it observed ("Root Cause"); the others it lists
    include ranks its own teardown ended (SIGTERM, then SIGKILL 30 s later), so one of
    those counts only if torchrun saw it in the same second as the first (its times are
    whole seconds), or if its signal is none torchrun sends (SIGSEGV, SIGABRT, ...).
    torchrun itself killed (``returncode`` < 0) prints no table."""
    table = output.rpartition("Failures:")[2]  # (the others first, the root cause last)
    others, _, root = table.partition("Root Cause")
    first = [_lost(found) for found in _FAILURE.finditer(root)]
    if first and first[0] is not None:
        return first[0]
    when = next((found["time"] for found in _FAILURE.finditer(root)), None)
    for found in _FAILURE.finditer(others):
        lost = _lost(found)
        if lost is None or lost.handled:  # (a handled stop there is torchrun's teardown)
            continue
        if found["time"] == when or lost.signal not in ("SIGTERM", "SIGKILL", "SIGINT"):
            return lost
    if returncode is not None and returncode < 0:
        return LostRank(None, socket.gethostname(), agent_pid, _name(-returncode))
    return None


def _lost(found: re.Match[str]) -> LostRank | None:
    """One entry of torchrun's table as a lost rank (None: it ended by its own error).
    (The table is this node's torchrun's: its "host" is ``socket.getfqdn()``, "localhost"
    on a machine without a domain; the node is named as run.json's agent names it.)"""
    code, node = int(found["code"]), socket.gethostname()
    if code < 0:
        return LostRank(int(found["rank"]), node, int(found["pid"]), _name(-code))
    if code in _HANDLED:
        return LostRank(int(found["rank"]), node, int(found["pid"]), _HANDLED[code].name, True)
    return None


#: what a launched rank that received a stop signal itself says (:func:`say_received`)
_RECEIVED = re.compile(r"rank (\d+) \(pid (\d+) on (\S+)\) received (SIG[A-Z]+)")


def say_received(signum: int | None) -> None:
    """In a launched rank that a stop signal reached (not one that stopped because
    another rank asked): one line naming it, for the launcher. Why: ranks that agree to
    stop (training/stopping.py) all end with 143, and torchrun's first observed failure
    is whichever exited first, not the one signalled."""
    import os
    import sys

    from ..training.ranks import rank

    if signum is not None:
        who = f"rank {rank()} (pid {os.getpid()} on {socket.gethostname()})"
        print(f"note: {who} received {_name(signum)}", file=sys.stderr, flush=True)


def received_rank(output: str) -> LostRank | None:
    """The first rank that said it received a stop signal (:func:`say_received`)."""
    found = _RECEIVED.search(output)
    if found is None or found[4] not in ("SIGTERM", "SIGINT"):
        return None
    return LostRank(int(found[1]), found[3], int(found[2]), found[4], handled=True)


def _handled_stop(output: str, lost: LostRank) -> LostRank | None:
    """The rank whose stop ended the run, where a rank's exit on our own stop (143, 130)
    heads torchrun's table: the first rank that said it received the signal (ranks that
    agree to stop all end so, whichever exits first); None where a rank's own error came
    before any such word (torchrun's teardown sent that signal, after the error: the
    error is the run's end, and two failures in one second are a tie torchrun breaks by
    rank)."""
    received = _RECEIVED.search(output)
    error = re.search(r"^error: ", output, re.MULTILINE)
    if error is not None and (received is None or error.start() < received.start()):
        return None
    return received_rank(output) or lost


def stopped_rank(output: str) -> LostRank | None:
    """A rank that a ``note: rank N (pid P on HOST) is stopped`` line of another rank
    named (training/ranks.py ``stopped_ranks``, written as a collective timed out)."""
    found = re.search(r"rank (\d+) \(pid (\d+) on (\S+)\) is stopped", output)
    if found is None:
        return None
    return LostRank(int(found[1]), found[3], int(found[2]), "SIGSTOP")


def _name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def record_lost(out: Path, lost: LostRank, line: str, agent: tuple[str, int] | None) -> None:
    """run.json says what the terminal says: the status, the line, the lost process.

    Only a run.json this launch's rank 0 wrote (``agent``: this node's torchrun), and
    one that rank 0 left unfinished or finished otherwise (each rank saw only a
    consequence: a failed save, a lost peer, its own stop)."""
    from ..training.metrics_file import strict_json, write_atomically

    path = out / "run.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(info, dict) or info.get("agent") not in (None, list(agent or ())):
        return
    info["status"] = lost.status
    info["lost_rank"] = lost.record()
    if lost.status == "failed":
        info["error"] = line
    else:
        info.pop("error", None)
        info["stopped"] = line
    write_atomically(path, strict_json(info, indent=2))


def files_line(out: Path) -> str:
    """What the run folder holds after the loss: the steps metrics.jsonl has, the newest
    complete checkpoint."""
    from ..training.metrics_file import read_metrics
    from .folder import latest_checkpoint_step

    try:
        steps = [r["step"] for r in read_metrics(out / "metrics.jsonl")]
    except (OSError, ValueError, KeyError):
        steps = []
    saved = latest_checkpoint_step(out)
    kept = f"; checkpoint of step {saved} saved: --resume continues from it" if saved else ""
    if not steps:
        return f"no step completed{kept}"
    held = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    return f"{held} in metrics.jsonl{kept}"


def check_lost(out: Path, output: str, returncode: int | None, agent_pid: int) -> None:
    """After a launch that did not succeed: if a signal took one of its processes, say
    which, where and what signal, in run.json (:func:`record_lost`) and as the error
    raised (a stop the rank handled: :class:`~..errors.Terminated` or
    :class:`~..errors.Interrupted`, whose ``held`` the CLI prints), so both say the same.
    Nothing if none did."""
    from ..errors import Interrupted, Terminated, TrainingError

    lost = lost_rank(output, returncode, agent_pid) or stopped_rank(output)
    if lost is not None and lost.handled:
        lost = _handled_stop(output, lost)
    if lost is None:
        return
    if lost.rank is None:  # torchrun killed: its orphaned ranks write run.json as they stop
        from .lifeline import wait_for_no_live_ranks

        wait_for_no_live_ranks(out, timeout_s=60)
    line = f"{lost.message()}: {files_line(out)}"
    record_lost(out, lost, line, (socket.gethostname(), agent_pid))
    if not lost.handled:
        raise TrainingError(line)
    raise (Terminated if lost.signal == "SIGTERM" else Interrupted)(line, held=line)
