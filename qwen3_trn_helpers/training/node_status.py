"""A running job seen from its ranks' files: per-node step times, a straggler, a silent node.

Every rank torchrun starts keeps ``OUT/ranks/rank-NNNNN.json`` (training/heartbeat.py):
its node, host, a heartbeat time, the step it is in and its last steps' times. This
module reads those files (from any machine that sees the run folder) and says, per node:
its step time, its *own* time, how long ago it last beat, and whether it is a straggler
or silent. ``qwen3-trn watch RUN`` prints :func:`screen`; rank 0 logs :func:`line`
every ``--watch-every`` steps.

Why an "own" time: in synchronous data parallelism every rank waits for the slowest at
each collective, so every rank's step takes as long as the slowest one's: step times
alone cannot name the slow node. Each rank stamps the moment its step's batch is ready
and the forward begins (after reading data, collecting garbage, the previous step's
bookkeeping), and the rank that arrives last there is the one the others wait for. A
node's own time is its step time minus how long it waited for the latest arrival (the
clocks of a job's nodes agree to well under a millisecond on AWS's time service); a
node whose own time exceeds ``factor`` x the median of the other nodes' is a straggler.
What this cannot see: a slow device inside the collectives of the forward and backward
(every rank then waits inside them alike), which shows as every node's step time
growing, not as one node.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import KiB, read_json
from .metrics_file import RECORD_LIMIT

#: the folder in a run folder that holds each rank's file (and, after a hang, its stack)
RANKS = "ranks"
#: a node slower than the median of the others by this factor is a straggler
STRAGGLER_FACTOR = 1.5
#: a rank whose heartbeat is this old (seconds) is silent (it beats every few seconds)
SILENT_S = 60.0
#: ranks whose processes started this close together belong to one attempt of the run
#: (torchrun starts them once every node joined); older files are an earlier attempt's
ATTEMPT_SPREAD_S = 300.0


def rank_file(out: Path, rank: int) -> Path:
    return Path(out) / RANKS / f"rank-{rank:05d}.json"


def read_ranks(out: str | Path) -> list[dict[str, Any]]:
    """The rank files of the newest attempt in ``out`` (unreadable ones are skipped: a
    file is replaced whole, so only a foreign file can be)."""
    found = []
    for path in sorted((Path(out) / RANKS).glob("rank-*.json")):
        try:
            record = read_json(path, limit=64 * KiB, fix="")  # (files.py: no pipe, no bomb)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("rank"), int):
            found.append(record)
    if not found:
        return []
    newest = max(r.get("started", 0) for r in found)
    world = next(r["world"] for r in found if r.get("started", 0) == newest)
    return [
        r for r in found if r.get("started", 0) >= newest - ATTEMPT_SPREAD_S and r["rank"] < world
    ]


@dataclass
class Node:
    """One node of the job, as its ranks' files show it."""

    index: int
    host: str
    ranks: list[int] = field(default_factory=list)
    step: int = 0  # the last step every rank of the node finished
    step_s: float | None = None  # median step time over the common recent steps
    own_s: float | None = None  # ... minus the wait for the latest rank (see module doc)
    beat_age_s: float = math.inf  # the stalest heartbeat among its ranks
    in_step_s: float | None = None  # how long its ranks have been in the current step
    straggler: bool = False
    silent: bool = False


def _own_times(ranks: list[dict[str, Any]]) -> dict[int, dict[int, tuple[float, float]]]:
    """Per step every rank finished, each rank's (step seconds, own seconds)."""
    steps: dict[int, dict[int, tuple[float, float, float]]] = {}
    for r in ranks:
        for step, step_s, ready in r.get("steps", []):
            steps.setdefault(step, {})[r["rank"]] = (step_s, ready)
    whole = {k: v for k, v in steps.items() if len(v) == len(ranks)}
    own: dict[int, dict[int, tuple[float, float]]] = {}
    for step, by_rank in whole.items():
        latest = max(ready for _, ready in by_rank.values())
        own[step] = {
            rank: (step_s, max(0.0, step_s - (latest - ready)))
            for rank, (step_s, ready) in by_rank.items()
        }
    return own


def nodes(
    ranks: list[dict[str, Any]],
    *,
    now: float | None = None,
    factor: float = STRAGGLER_FACTOR,
    silent_s: float = SILENT_S,
) -> list[Node]:
    """Each node's state, with its straggler and silent flags set."""
    now = time.time() if now is None else now
    by_node: dict[int, Node] = {}
    for r in ranks:
        node = by_node.setdefault(r["node"], Node(r["node"], str(r.get("host", "?"))))
        node.ranks.append(r["rank"])
    own = _own_times(ranks)
    recent = sorted(own)[-8:]  # a median over the last few: one slow step is no straggler
    for node in by_node.values():
        mine = [r for r in ranks if r["rank"] in node.ranks]
        node.step = min(r.get("step", 0) for r in mine)
        node.beat_age_s = max(now - r.get("beat", 0) for r in mine)
        starts = [r["since"] for r in mine if r.get("in_step") and r.get("since")]
        node.in_step_s = now - min(starts) if starts else None
        if recent:
            per_step = [[own[k][rank] for rank in node.ranks] for k in recent]
            node.step_s = statistics.median(max(t[0] for t in s) for s in per_step)
            node.own_s = statistics.median(max(t[1] for t in s) for s in per_step)
    found = sorted(by_node.values(), key=lambda n: n.index)
    beating = [n for n in found if n.beat_age_s <= silent_s]
    for node in found:
        node.silent = node.beat_age_s > silent_s and bool(beating)
        others = [n.own_s for n in found if n is not node and n.own_s is not None]
        if node.own_s is not None and others:
            node.straggler = node.own_s > factor * max(statistics.median(others), 1e-3)
    return found


def _seconds(value: float | None) -> str:
    return "-" if value is None or math.isinf(value) else f"{value:.2f}"


def verdict(found: list[Node], factor: float = STRAGGLER_FACTOR) -> str:
    """One sentence: the silent and straggling nodes, or that none is."""
    said = []
    for node in found:
        if node.silent:
            said.append(
                f"node {node.index} ({node.host}) is silent: no heartbeat for "
                f"{node.beat_age_s:.0f} s (stopped, killed or cut off)"
            )
        elif node.straggler:
            others = [n.own_s for n in found if n is not node and n.own_s is not None]
            said.append(
                f"node {node.index} ({node.host}) is a straggler: {node.own_s:.2f} s of its "
                f"own a step, the others' median {statistics.median(others):.2f} s "
                f"(over {factor:g}x)"
            )
    return "; ".join(said) or "no straggler, no silent node"


def line(found: list[Node], step: int, factor: float = STRAGGLER_FACTOR) -> str:
    """The log line rank 0 writes every ``--watch-every`` steps."""
    times = ", ".join(f"node {n.index} {_seconds(n.step_s)}/{_seconds(n.own_s)}" for n in found)
    return f"nodes at step {step} (step s/own s): {times}; {verdict(found, factor)}"


def screen(out: str | Path, *, factor: float = STRAGGLER_FACTOR, silent_s: float = SILENT_S) -> str:
    """``qwen3-trn watch``'s table for the run in ``out``."""
    ranks = read_ranks(out)
    if not ranks:
        return (
            f"{Path(out) / RANKS} holds no rank files: the run has not started its ranks, "
            "or it ran in one process (ranks write them when torchrun starts them)"
        )
    found = nodes(ranks, factor=factor, silent_s=silent_s)
    header = f"{'node':>4}  {'host':<20} {'ranks':>5} {'step':>6} {'step s':>7} {'own s':>7} "
    header += f"{'in step s':>9} {'beat s':>7}  state"
    rows = [header]
    for n in found:
        state = "SILENT" if n.silent else "STRAGGLER" if n.straggler else "ok"
        rows.append(
            f"{n.index:>4}  {n.host[:20]:<20} {len(n.ranks):>5} {n.step:>6} "
            f"{_seconds(n.step_s):>7} {_seconds(n.own_s):>7} {_seconds(n.in_step_s):>9} "
            f"{n.beat_age_s:>7.0f}  {state}"
        )
    world = ranks[0]["world"]
    rows.append(f"{len(ranks)} of {world} ranks reporting; {verdict(found, factor)}")
    quiet = min(n.beat_age_s for n in found)
    if quiet > silent_s:  # every node quiet: the run is over, or the whole job stopped
        try:
            run = read_json(Path(out) / "run.json", limit=RECORD_LIMIT, fix="")
            status = run.get("status", "?")
        except (OSError, ValueError, AttributeError):
            status = "unknown"
        rows.append(f"no rank has beaten for {quiet:.0f} s: the run is not running "
                    f"(run.json says {status}); the times are its last")  # fmt: skip
    return "\n".join(rows)
