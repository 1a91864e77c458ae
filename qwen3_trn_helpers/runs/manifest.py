"""run.json's writers: rank 0's record of a run (the spec as the job ran it, the resolved
plan, how the run stands), and a launch's record of a stop its ranks could not make.

Beside the run's other files (runs/folder.py: the folder and who holds it; training/resume.py:
the resume checks, ``read_run_record``; runs/lost_rank.py: a launch's record of a lost
rank); each write replaces run.json whole or not at all.
"""

from __future__ import annotations

import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..files import read_json
from ..training.metrics_file import RECORD_LIMIT, strict_json, write_atomically
from ..training.plan import Plan


def write_manifest(
    out: Path,
    status: str,
    plan: Plan,
    *,
    launched: bool,
    init_dir: Path | None = None,
    agent: int | None = None,
    **extra: Any,
) -> None:
    """``run.json``: the spec as the job ran it, the resolved plan and how the run stands
    (rank 0 writes it). ``init_dir``: the folder the first weights came from; ``agent``:
    the pid of the torchrun that started a launched run (runs/lifeline.agent_pid)."""
    info = {
        "status": status,
        # the ranks a launch leaves to torchrun are the job's, as torchrun counted them
        "spec": {**asdict(plan.spec), "nproc": plan.nproc, "nnodes": plan.nnodes},
        "resolved": plan.summary(),
        "shape": asdict(plan.shape),
        "init_dir": str(init_dir) if init_dir else None,
        "layout_reason": plan.layout_reason,
        # the torchrun agent that started this rank: its node writes loss.png
        "agent": [socket.gethostname(), agent] if launched else None,
        **extra,
    }
    # beside it, then renamed: a full disk leaves the last run.json whole, never cut
    write_atomically(out / "run.json", strict_json(info, indent=2))


#: run.json's ``stopped`` when a launch records the stop its ranks could not
KILLED_IN_A_STEP = (
    "the ranks were killed in a step, before they could record the stop (torchrun's 30 s "
    "grace ran out); recorded by the launch"
)


def record_stop(
    out: Path, status: str, steps_completed: int, agent: int | None, why: str = KILLED_IN_A_STEP
) -> None:
    """run.json says a launch's run stopped (``status``: terminated or interrupted) after
    ``steps_completed`` steps, where it still says ``running``: the ranks were killed in
    a step, before rank 0 could record the stop (``why``). Only on the node whose
    torchrun (``agent``: this node's torchrun pid) started rank 0."""
    _settle_running(out, agent, status=status, steps_completed=steps_completed, stopped=why)


def record_failure(out: Path, error: str, agent: int | None) -> None:
    """run.json says ``failed`` and why (``error``), where ranks that ended without a
    word (the watchdog's SIGALRM: training/watchdog.py) left it ``running``. Only on the
    node whose torchrun (``agent``) started rank 0."""
    _settle_running(out, agent, status="failed", error=error)


def _settle_running(out: Path, agent: int | None, **fields: Any) -> None:
    """run.json updated with ``fields`` where it still says ``running`` and its run is
    this node's (started by torchrun ``agent``, or by no torchrun); else left alone."""
    try:
        info = read_json(out / "run.json", limit=RECORD_LIMIT, fix="")  # (files.py: no pipe)
    except (OSError, ValueError):
        return
    ours = isinstance(info, dict) and info.get("agent") in (None, [socket.gethostname(), agent])
    if ours and info.get("status") == "running":
        info.update(fields)
        write_atomically(out / "run.json", strict_json(info, indent=2))
