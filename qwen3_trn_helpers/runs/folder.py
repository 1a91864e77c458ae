"""A run's folder: where it goes, who holds it, what it holds, and how it is resumed.

Every way of running (in this process, through torchrun, on several nodes) writes the
same folder: ``run.json`` (the spec, the resolved plan, how the run ended),
``metrics.jsonl`` (a line per step), checkpoints, and a log per launching node. This
module decides the folder's name, holds it for the run's life, clears a previous run on
``--overwrite``, checks a ``--resume`` against what was saved, and reports each step as
it lands; runs/manifest.py writes run.json.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RunFolderError
from ..files import check_output_folder, lock_folder, read_json
from ..training.metrics_file import (
    RECORD_LIMIT,
    keep_steps_before,
    read_metrics,
)
from ..training.plan import Plan
from ..training.resume import ResumeRecord, check_resume, read_run_record, unrecorded_end
from ..training.spec import RESUME_AUTO, RunSpec

#: what a run writes into its folder (a new run with --overwrite removes them all)
RUN_FILES = ("metrics.jsonl", "run.json", "loss.png", "launch.log")
RUN_FOLDERS = ("checkpoint", "tb", "ranks")


@dataclass
class RunResult:
    out: Path
    spec: RunSpec
    metrics: list[dict[str, Any]] = field(default_factory=list)
    status: str = "completed"
    wall_s: float = 0.0
    plan: Plan | None = None
    #: (host, pid) of the torchrun agent that started rank 0 (None: not launched)
    agent: tuple[str, int] | None = None
    #: whether this process writes the run's own files (loss.png); on several nodes,
    #: only the one whose torchrun started rank 0
    writer: bool = True

    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    @property
    def losses(self) -> list[float]:
        return [m["loss"] for m in self.metrics]

    @classmethod
    def from_folder(cls, out: str | Path) -> RunResult:
        """A finished run read back from its folder (run.json and metrics.jsonl)."""
        out = Path(out)
        info = read_json(out / "run.json", limit=RECORD_LIMIT, fix="it is no finished run")
        metrics = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
        return cls(
            out=out,
            spec=RunSpec(**info["spec"]),
            metrics=metrics,
            status=info["status"],
            wall_s=info.get("wall_s", 0.0),
            agent=tuple(info["agent"]) if info.get("agent") else None,
        )


def latest_checkpoint_step(out: str | Path) -> int:
    """The newest *complete* checkpoint under ``out/checkpoint`` (0 if none).

    Found by torchtitan's own loader's rule (torchtitan_internals.find_checkpoint_step):
    a ``step-N`` folder holding DCP's ``.metadata`` or a safetensors index. A folder
    left half-written by an interrupted save does not count.
    """
    from ..torchtitan_internals import find_checkpoint_step

    return max(find_checkpoint_step(Path(out) / "checkpoint"), 0)


def fresh_overwrite(spec: RunSpec) -> bool:
    """Whether a fresh start may clear an earlier run of ours in its folder: with
    ``--overwrite``, and with ``--resume auto`` (the folder is the job's own; without a
    checkpoint, what an interrupted first attempt left is started again)."""
    return spec.overwrite or spec.resume == RESUME_AUTO


@dataclass(frozen=True)
class Settled:
    """A run folder made ready for one run: where its training starts."""

    resumed_from: int = 0  # the checkpoint step a resumed run continues from (0: fresh)
    finished: bool = False  # --resume auto over a run whose checkpoint holds every step
    reshard: bool = False  # the checkpoint's data position cannot load: the data restarts
    resume: ResumeRecord | None = None  # what the resume changed and noted (run.json)


def settle_run_folder(
    out: Path,
    plan: Plan,
    *,
    writer: bool,
    share: tuple[int, int] | None,
    decides: bool = True,
) -> Settled:
    """Resume or start the run in ``out`` (held by the caller), from one look at its
    newest complete checkpoint; the one answer every way of running acts on.

    ``--resume auto`` over a run that trained every step is ``finished``: a job requeued
    or restarted after its last step has nothing left to train. ``--resume``, or ``auto``
    over a folder with a checkpoint, resumes: the checkpoint is checked against this
    run's settings and files (:func:`check_resume`) before run.json says anything new.
    Otherwise the run starts fresh, and the ``writer`` clears an earlier run of ours
    (:func:`prepare_out_dir`).

    ``share``: (rank, world) in a rank, which hashes its part of the shards and learns
    whether the checkpoint's data position cannot load here (``reshard``); None in the
    launcher of one node, which checks before its ranks start and drops the metrics
    lines they will train again. ``decides=False``: one node's launcher of several,
    whose folder the job's rank 0 settles once (every node may be given the same folder
    on shared storage, so no node refuses it because another got there first).
    """
    spec = plan.spec
    auto, overwrite = spec.resume == RESUME_AUTO, fresh_overwrite(spec)
    step = latest_checkpoint_step(out)
    # a run killed outright left run.json saying `running` (the caller holds the folder,
    # so no live run writes it): the first command that reads it says so
    killed = unrecorded_end(out) if decides and (share is None or share[0] == 0) else None
    if killed and (spec.resume or overwrite):
        print(f"note: {killed}", file=sys.stderr, flush=True)
    if decides and auto and step >= spec.steps and read_run_record(out)[0] is not None:
        return Settled(step, finished=True)
    if not (step > 0 if auto else spec.resume):  # (auto without a checkpoint: fresh)
        if not decides:
            out.mkdir(parents=True, exist_ok=True)
        elif writer:
            try:
                prepare_out_dir(out, overwrite)
            except RunFolderError as e:
                raise RunFolderError(f"{e}; {killed}" if killed else str(e)) from None
        return Settled()
    if step == 0:
        raise RunFolderError(
            f"nothing to resume in {out}: it has no complete checkpoint/step-N folder; run "
            "with --checkpoint-interval N to save checkpoints"
        )
    # Steps after the checkpoint were trained by the interrupted run and are trained
    # again; their metrics lines are dropped when the resumed run logs its first step
    # (training/metrics.py), so none appears twice.
    if not decides:
        return Settled(step)
    from ..training.checkpoint import newest_complete_step

    # a damaged newest checkpoint: the one before it, with one note (none: its error)
    speaks = share is None or share[0] == 0
    step = newest_complete_step(out / "checkpoint", step, echo=speaks, set_aside=writer) or step
    record = check_resume(out, step, plan, share=share)
    if share is None:
        # rank 0 drops the lines only when it logs its first step: drop them now, so
        # that the launcher never reports the steps to be trained again
        keep_steps_before(out / "metrics.jsonl", step + 1)
        return Settled(step, resume=record)
    from ..data.global_order import data_position_kept

    kept = data_position_kept(out / "checkpoint" / f"step-{step}", plan, echo=share[0] == 0)
    return Settled(step, reshard=not kept, resume=record)


@dataclass(frozen=True)
class Claim:
    """A run folder taken by this process for one run: where it is, where training starts."""

    out: Path
    settled: Settled


@contextmanager
def claim(plan: Plan, *, launcher: bool = False) -> Iterator[Claim]:
    """Take the run folder for the life of the ``with``: name it, hold it, settle it; the
    one rule for who owns a run's folder, for every way of running.

    A rank (``launcher=False``: a run in this process, or a rank torchrun started): rank
    0 names the folder; it holds it when alone or on several nodes (which may share one
    folder); on one node the launching parent holds it and each rank holds it shared
    while alive (runs/lifeline.py). Each rank hashes its share of a resumed checkpoint;
    rank 0 clears a fresh one. The launcher of one node's ranks (``launcher=True``,
    runs/torchrun.py): on one node it holds the folder for the run's life and settles it
    before any rank starts; on several it only makes it, for the job's rank 0 to settle.
    """
    from ..training.ranks import launched_by_torchrun, rank, world_size

    spec = plan.spec
    single_node = plan.nnodes == 1
    rank0 = launcher or rank() == 0  # (rank 0 and the launcher name the folder)
    out = new_out_dir(spec.out) if rank0 else Path(spec.out or "runs/_nonzero_rank")
    if launcher:
        with own_run_folder(out) if single_node else nullcontext():
            settled = settle_run_folder(out, plan, writer=True, share=None, decides=single_node)
            yield Claim(out, settled)
        return
    launched = launched_by_torchrun()
    owner = rank0 and (not launched or not single_node)
    if launched:  # stop with the launching command; hold a one-node folder while alive
        from .lifeline import bind_rank

        bind_rank(out, hold_folder=single_node and spec.out is not None)
    with own_run_folder(out) if owner else nullcontext():
        settled = settle_run_folder(out, plan, writer=rank0, share=(rank(), world_size()))
        yield Claim(out, settled)


def new_out_dir(out: str | Path | None) -> Path:
    """The run folder's path: ``out``, or a new ``runs/<date-time>`` one."""
    if out is None:
        base = Path("runs") / time.strftime("%Y%m%d-%H%M%S")
        out, n = base, 1
        while Path(out).exists():
            n += 1
            out = Path(f"{base}-{n}")
    out = Path(out)
    check_output_folder(out, "--out")  # (a file, a device, a name too long: files.py)
    return out


#: held (flock) by the process that writes a run folder, for the run's whole life
LOCK_FILE = ".qwen3-trn.lock"
OWNER_FILE = ".qwen3-trn.owner"  # who holds it, for the message a second run reads


@contextmanager
def own_run_folder(out: Path) -> Iterator[None]:
    """Hold ``out`` while a run writes it; refuse if another live process holds it.

    The lock is the kernel's (``flock``, through filelock): it goes when its process
    does, however that ends, so a folder left by a killed run is simply taken over.
    Every writer takes it first: a second run, ``--overwrite`` and ``--resume`` are all
    refused while a run is writing there.
    """
    try:
        lock, owner = lock_folder(out, LOCK_FILE, OWNER_FILE)
    except OSError as e:
        raise RunFolderError(
            f"cannot write the run folder {out} ({e.strerror or e}); choose a folder you "
            "can write to (--out)"
        ) from None
    if lock is None:
        raise RunFolderError(
            f"{out} is being written by a run still in progress ({owner}); wait for it to "
            "end or stop it, or choose another --out"
        )
    try:
        from .lifeline import check_no_live_ranks

        check_no_live_ranks(out)  # a killed launcher's ranks may still be writing
    except BaseException:
        lock.release()
        raise
    try:
        command = " ".join(sys.argv[:6]) or "python"
        try:
            (out / OWNER_FILE).write_text(f"pid {os.getpid()} on {socket.gethostname()}: {command}")
        except OSError:
            pass  # only for another run's message (a full disk: run.json's write names it)
        yield
    finally:
        (out / OWNER_FILE).unlink(missing_ok=True)
        lock.release()


def prepare_out_dir(out: Path, overwrite: bool = False) -> Path:
    """Make ``out`` hold no other run's metrics or checkpoints (the caller owns it).

    torchtitan resumes from the newest checkpoint in its dump folder, so ``overwrite``
    removes an earlier run's checkpoints too: the new run starts fresh. It removes only
    what a run of ours wrote (:data:`RUN_FILES`, :data:`RUN_FOLDERS`), and only from a
    folder that a run of ours wrote (it has run.json).
    """
    # lexists: a link (even a dangling one) named like ours is a previous run's entry too
    previous = [name for name in RUN_FILES[:2] + RUN_FOLDERS if os.path.lexists(out / name)]
    if previous:
        if not overwrite:
            raise RunFolderError(
                f"{out} already holds a run ({', '.join(previous)}); pass a new --out "
                "folder, or --overwrite to replace it"
            )
        if not (out / "run.json").is_file():
            raise RunFolderError(
                f"{out} holds {', '.join(previous)} but no run.json: not a qwen3-trn run "
                "folder, and --overwrite removes only a run of ours; choose another --out"
            )
        # folders first and run.json last: a removal that fails leaves a folder that is
        # still a run of ours, which the next --overwrite can clear
        for name in (*RUN_FOLDERS, *RUN_FILES[2:], *RUN_FILES[:2]):
            _remove_entry(out / name)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _remove_entry(path: Path) -> None:
    """Remove one entry of a previous run without following a link (a ``checkpoint``
    that links to another run's folder goes, that folder stays); a failure is named."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise RunFolderError(
            f"--overwrite could not remove {path} ({e.strerror or e}); nothing of the new "
            "run was written: fix its permissions or remove it yourself, then run again"
        ) from None
