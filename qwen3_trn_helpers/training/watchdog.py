"""Stop a hung training step after a stated time, with every rank's Python stack saved.

What torch and torchtitan offer, and what each leaves open:

- collective timeouts (torchtitan's ``comm.init_timeout_seconds`` and
  ``train_timeout_seconds``, 300 and 100 s; raised to 2 x a save + 60 s when the run saves
  checkpoints, 2,559 s for 30B-A3B: training/stopping.py): they end a rank stuck in a
  collective, that late, and say nothing of where the other ranks were;
- the flight recorder (torchtitan's ``comm.trace_buf_size``, torch's
  ``TORCH_FR_BUFFER_SIZE``): a ring of the last collectives, dumped when an NCCL
  collective times out. It records NCCL's (and torchcomms') collectives only: gloo (CPU)
  and the Neuron backend record none, so this package sets its size to 0;
- torchelastic's error handler turns faulthandler on for fatal signals (SIGSEGV, ...)
  only, and a hung rank raises none.

What this module adds, on ranks torchrun started: Python's own
``faulthandler.dump_traceback_later``, armed as each training step starts (not the first
two steps of a process, which compile) and cancelled as it ends. When a step outlasts
``--hang-timeout``, faulthandler's C thread writes every thread's Python stack into
``OUT/ranks/stack-NNNNN.txt`` (it needs no GIL, so a rank stuck in C dumps too), and a
process timer (``setitimer``: SIGALRM, whose default action ends the process) ends the
rank :data:`DUMP_GRACE_S` later. Every rank of a hung job armed its watchdog at about
the same moment, so each dumps before any ends; torchrun then sees a failed rank and
stops the job (on every node), and the scheduler's restart (Kubernetes, torchrun's
``--max-restarts``, the Slurm script's requeue) continues from the last checkpoint.
:func:`watchdog_stop` turns the stacks into the one record the launch reports.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import IO, Any

from .node_status import RANKS, read_ranks

#: a process's first steps are not watched: they compile (the first builds every graph;
#: the second often recompiles: the optimizer's state exists only after the first)
UNWATCHED_STEPS = 2
#: seconds between a rank's stack dump and its end: every hung rank dumps before any ends
DUMP_GRACE_S = 5.0
#: in the run folder, once the watchdog stopped an attempt: what it found
RECORD = "watchdog.json"
_TIMEOUT = "Timeout ("  # the first words faulthandler writes when its timer fires


def stack_file(out: Path, rank: int) -> Path:
    return Path(out) / RANKS / f"stack-{rank:05d}.txt"


class Watchdog:
    """One rank's watchdog (off when ``hang_s`` is 0)."""

    def __init__(self, out: Path, *, rank: int, node: int, hang_s: float) -> None:
        self.path, self.rank, self.node, self.hang_s = stack_file(out, rank), rank, node, hang_s
        self._file: IO[str] | None = None
        self._kept = self._header_end = 0  # the file's size before and after our header

    def arm(self, step: int) -> None:
        if self.hang_s <= 0:
            return
        if self._file is None:
            self._open()
        faulthandler.dump_traceback_later(self.hang_s, exit=False, file=self._file)
        signal.setitimer(signal.ITIMER_REAL, self.hang_s + DUMP_GRACE_S)

    def disarm(self) -> None:
        if self._file is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            faulthandler.cancel_dump_traceback_later()

    def _open(self) -> None:
        """The stack file, opened for appending (an earlier attempt's dump stays), with a
        header line saying whose stack follows; faulthandler writes to its descriptor."""
        self._file = open(self.path, "a")  # noqa: SIM115 (open for the process's life)
        self._kept = os.fstat(self._file.fileno()).st_size
        self._file.write(
            f"# rank {self.rank}, node {self.node} ({socket.gethostname()}), pid "
            f"{os.getpid()}, {time.strftime('%Y-%m-%d %H:%M:%S %z')}: a training step over "
            f"{self.hang_s:g} s (--hang-timeout) dumps every thread's Python stack below\n"
        )
        self._file.flush()
        self._header_end = os.fstat(self._file.fileno()).st_size

    def close(self) -> None:
        """Disarmed; a header nothing followed is taken back (the file goes if empty)."""
        self.disarm()
        if self._file is None:
            return
        fd = self._file.fileno()
        if os.fstat(fd).st_size == self._header_end:
            os.ftruncate(fd, self._kept)
        self._file.close()
        self._file = None
        if self.path.exists() and self.path.stat().st_size == 0:
            self.path.unlink(missing_ok=True)


# --- after the stop: the record ----------------------------------------------------------


def _last_dump(text: str) -> list[list[str]] | None:
    """The threads of the last dump in a stack file (each a list of frames, innermost
    first), or None when the last header was followed by no dump."""
    last = text.rfind("\n# rank ")  # this process's header (a file may hold earlier ones)
    dump = text[last + 1 :] if last >= 0 else text
    if _TIMEOUT not in dump:
        return None
    threads, frames = [], None
    for row in dump.splitlines():
        if row.startswith(("Thread 0x", "Current thread 0x")):
            frames = []
            threads.append(frames)
        elif frames is not None and row.strip().startswith("File "):
            frames.append(row.strip())
    return threads


def _where(frame: str) -> str:
    """``File "/a/b/c.py", line 12 in f`` -> ``c.py:12 in f``."""
    found = re.match(r'File "(.*)", line (\d+) in (.*)', frame)
    if not found:
        return frame
    return f"{Path(found.group(1)).name}:{found.group(2)} in {found.group(3)}"


def _at(frames: list[str]) -> str:
    """Where a thread was: its innermost frame and, when that is inside torch, the
    innermost frame outside it (the call in torchtitan or this package that waits)."""
    if not frames:
        return "?"
    where = _where(frames[0])
    if f"{os.sep}torch{os.sep}" in frames[0]:
        caller = next((f for f in frames if f"{os.sep}torch{os.sep}" not in f), None)
        if caller is not None:
            where += f", from {_where(caller)}"
    return where


def _main_thread(threads: list[list[str]]) -> list[str]:
    """The main thread's frames: the one not started by ``threading`` (whose outermost
    frame is threading.py's ``_bootstrap``)."""
    for frames in threads:
        if frames and "threading.py" not in frames[-1]:
            return frames
    return threads[-1] if threads else []


def watchdog_stop(out: str | Path, since: float) -> str | None:
    """If the watchdog stopped the run in ``out`` (a stack dumped after ``since``, a
    time.time()): the record, written to ``OUT/ranks/watchdog.json``, as one line."""
    out = Path(out)
    stacks: dict[int, dict[str, Any]] = {}
    for path in sorted((out / RANKS).glob("stack-*.txt")):
        try:
            if path.stat().st_mtime < since:
                continue
            threads = _last_dump(path.read_text(errors="replace"))
        except OSError:
            continue
        if threads is not None:
            main = _main_thread(threads)
            rank = int(path.stem.split("-")[1])
            in_torch = bool(main) and f"{os.sep}torch{os.sep}" in main[0]
            stacks[rank] = {"file": str(path), "at": _at(main), "in_torch": in_torch}
    if not stacks:
        return None
    ranks = {r["rank"]: r for r in read_ranks(out)}
    hang_s = max((r.get("hang_s", 0) for r in ranks.values()), default=0)
    step = min((r["in_step"] for r in ranks.values() if r.get("in_step")), default=None)
    silent = sorted(set(ranks) - set(stacks))
    places: dict[str, list[int]] = {}
    for rank, found in sorted(stacks.items()):
        places.setdefault(found["at"], []).append(rank)

    def who(rank_ids: list[int]) -> str:
        named = [f"{r} (node {ranks[r]['node']}, {ranks[r]['host']})" if r in ranks else str(r)
                 for r in rank_ids[:4]]  # fmt: skip
        more = f" and {len(rank_ids) - 4} more" if len(rank_ids) > 4 else ""
        return ("rank " if len(rank_ids) == 1 else "ranks ") + ", ".join(named) + more

    # the likely cause first: ranks outside torch (a collective's wait is inside it),
    # then the fewest ranks at one place (the odd one out)
    ordered = sorted(places.items(), key=lambda kv: (stacks[kv[1][0]]["in_torch"], len(kv[1])))
    said = "; ".join(f"{who(r)} at {at}" for at, r in ordered[:3])
    record = {
        "stopped": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "step": step,
        "hang_timeout_s": hang_s,
        "stacks": {str(r): s for r, s in sorted(stacks.items())},
        "no_stack": silent,
    }
    partial = out / RANKS / f".{RECORD}.partial"
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, out / RANKS / RECORD)
    none = f"; {who(silent)} left no stack (stopped or killed first)" if silent else ""
    in_step = f"step {step}" if step else "a step"
    return (
        f"the watchdog stopped the run: {in_step} ran over {hang_s:g} s (--hang-timeout); "
        f"{said}{none}; every rank's Python stack is in {out / RANKS}/stack-NNNNN.txt "
        f"(record: {out / RANKS / RECORD}); --resume auto continues from the last checkpoint"
    )
