"""Each rank's step times and heartbeat, in the run folder, for ``qwen3-trn watch``.

A rank torchrun started keeps ``OUT/ranks/rank-NNNNN.json``: which rank and node it is,
a heartbeat time, the step it is in (since when), and its last steps' times (the step's
seconds and the moment its batch was ready: training/node_status.py says why both). A
thread rewrites the file every :data:`BEAT_S` seconds, whole (a temporary file renamed
over it), so an interrupted run leaves every file valid and a reader never sees half of
one; it beats while the main thread sits in a step, so a rank that stops beating is
stopped, killed or cut off, not busy. Rank 0's thread also writes the per-node line
(node_status.line) into the log every ``--watch-every`` steps. The watchdog that stops a
hung step is training/watchdog.py's; the step hooks here arm and disarm it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import node_status
from .watchdog import Watchdog

#: seconds between a rank's heartbeats (a job of 1,024 ranks: ~200 small renames a second)
BEAT_S = 5.0
#: the steps a rank file keeps (enough for a reader to find steps every rank has written)
KEPT_STEPS = 32


class RankWatch:
    """One rank's file, heartbeat thread and step hooks (and its watchdog)."""

    def __init__(
        self,
        out: str | Path,
        *,
        rank: int,
        world: int,
        node: int,
        hang_s: float = 0,
        watch_every: int = 0,
    ) -> None:
        self.path = node_status.rank_file(Path(out), rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.watch_every = watch_every
        self.state: dict[str, Any] = {
            "rank": rank, "world": world, "node": node, "host": socket.gethostname(),
            "pid": os.getpid(), "started": time.time(), "beat": time.time(), "step": 0,
            "in_step": None, "since": None, "hang_s": hang_s, "steps": [],
        }  # fmt: skip
        self._steps: deque = deque(maxlen=KEPT_STEPS)
        self._ready: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reported = 0  # the last step rank 0 wrote the per-node line for
        self._due, self._due_since = 0, 0.0
        self.watchdog = Watchdog(Path(out), rank=rank, node=node, hang_s=hang_s)
        self._write()
        self._thread = threading.Thread(target=self._beat, name="qwen3-trn-heartbeat", daemon=True)
        self._thread.start()

    # --- the step hooks (main thread) ---------------------------------------------------

    @contextmanager
    def step(self, step: int, *, watched: bool) -> Iterator[None]:
        """Around one training step: its time recorded, the watchdog armed (``watched``)."""
        started = time.time()
        with self._lock:
            self.state.update(in_step=step, since=started)
            self._ready = None
        if watched:
            self.watchdog.arm(step)
        try:
            yield
        finally:
            self.watchdog.disarm()
        ended = time.time()
        with self._lock:
            self._steps.append([step, round(ended - started, 4), self._ready or started])
            self.state.update(step=step, in_step=None, since=None, steps=list(self._steps))

    def batches(self, data_iterator: Iterator[Any]) -> Iterator[Any]:
        """The step's batches, the moment the last one is in hand stamped: the step's
        first collective (torchtitan's count of the batch's tokens over every rank)
        comes right after, and there the ranks wait for the latest."""
        for batch in data_iterator:
            self._ready = time.time()
            yield batch

    # --- the thread ---------------------------------------------------------------------

    def _write(self) -> None:
        with self._lock:
            self.state["beat"] = time.time()
            text = json.dumps(self.state)
        partial = self.path.with_name(f".{self.path.name}.partial")
        try:
            partial.write_text(text)
            os.replace(partial, self.path)
        except OSError:
            pass  # a full disk: the next beat tries again; the run itself goes on

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            self._write()
            if self.state["rank"] == 0 and self.watch_every:
                self._report()

    def _report(self, final: bool = False) -> None:
        """Rank 0: the per-node line, once every rank has written the step it is due at
        (or after three beats of waiting: then the line names who is behind; ``final``:
        at once, the run's last line)."""
        due = self.state["step"] // self.watch_every * self.watch_every
        if due <= self._reported:
            return
        if self._due != due:
            self._due, self._due_since = due, time.time()
        ranks = node_status.read_ranks(self.path.parent.parent)
        written = min((r.get("step", 0) for r in ranks), default=0)
        behind = len(ranks) < self.state["world"] or written < due
        if behind and not final and time.time() - self._due_since < 3 * BEAT_S:
            return
        found = node_status.nodes(ranks)
        print(f"watch: {node_status.line(found, due)}", flush=True)
        self._reported = due

    def close(self) -> None:
        """Stop beating; the file stays (its last state), the watchdog is disarmed."""
        self._stop.set()
        self._thread.join(timeout=BEAT_S * 2)
        self.watchdog.close()
        self._write()
        if self.state["rank"] == 0 and self.watch_every:
            self._report(final=True)
