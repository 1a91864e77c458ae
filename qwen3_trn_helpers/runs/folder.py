"""A run's folder: where it goes, who holds it, what it holds, and how it is resumed.

Every way of running (in this process, through torchrun, on several nodes) writes the
same folder: ``run.json`` (the spec, the resolved plan, how the run ended),
``metrics.jsonl`` (a line per step), checkpoints, and a log per launching node. This
module decides the folder's name, holds it for the run's life, clears a previous run on
``--overwrite``, checks a ``--resume`` against what was saved, and reports each step as
it lands.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RunFolderError
from ..training.metrics_file import read_metrics, strict_json
from ..training.plan import Plan
from ..training.spec import RESUME_AUTO, RunSpec

#: what a run writes into its folder (a new run with --overwrite removes them all)
RUN_FILES = ("metrics.jsonl", "run.json", "loss.png", "launch.log")
RUN_FOLDERS = ("checkpoint", "tb")


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
        info = json.loads((out / "run.json").read_text())
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


def resumes(spec: RunSpec, out: str | Path) -> bool:
    """Whether this run continues one: ``--resume``, or ``--resume auto`` over a folder
    that holds a complete checkpoint (without one, ``auto`` starts fresh)."""
    if spec.resume == RESUME_AUTO:
        return latest_checkpoint_step(out) > 0
    return bool(spec.resume)


def already_trained(spec: RunSpec, out: str | Path) -> bool:
    """``--resume auto`` over a run whose checkpoint already holds every step: a job
    requeued or restarted after it finished has nothing left to train."""
    return (
        spec.resume == RESUME_AUTO
        and (Path(out) / "run.json").is_file()
        and latest_checkpoint_step(out) >= spec.steps
    )


def fresh_overwrite(spec: RunSpec) -> bool:
    """Whether a fresh start may clear an earlier run of ours in its folder: with
    ``--overwrite``, and with ``--resume auto`` (the folder is the job's own; without a
    checkpoint, what an interrupted first attempt left is started again)."""
    return spec.overwrite or spec.resume == RESUME_AUTO


def prepare_resume_dir(out: str | Path | None) -> tuple[Path, int]:
    """The run folder to resume and the step of its newest complete checkpoint.

    Steps after that checkpoint were trained by the interrupted run and will be trained
    again; their metrics lines are dropped when the resumed run logs its first step
    (training/metrics.py), so none appears twice.
    """
    if out is None:
        raise ConfigError("resume needs --out: the folder of the run to continue")
    out = Path(out)
    step = latest_checkpoint_step(out)
    if step == 0:
        raise RunFolderError(
            f"nothing to resume in {out}: it has no complete checkpoint/step-N folder; run "
            "with --checkpoint-interval N to save checkpoints"
        )
    return out, step


def new_out_dir(out: str | Path | None) -> Path:
    """The run folder's path: ``out``, or a new ``runs/<date-time>`` one."""
    if out is None:
        base = Path("runs") / time.strftime("%Y%m%d-%H%M%S")
        out, n = base, 1
        while Path(out).exists():
            n += 1
            out = Path(f"{base}-{n}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} is a file; name a folder for the run's files")
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
    from filelock import FileLock, Timeout

    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(out / LOCK_FILE), timeout=0)
        lock.acquire()
    except Timeout:
        try:
            owner = (out / OWNER_FILE).read_text().strip()
        except OSError:
            owner = "another process"
        raise RunFolderError(
            f"{out} is being written by a run still in progress ({owner}); wait for it to "
            "end or stop it, or choose another --out"
        ) from None
    except OSError as e:
        raise RunFolderError(
            f"cannot write the run folder {out} ({e.strerror or e}); choose a folder you "
            "can write to (--out)"
        ) from None
    try:
        from .lifeline import check_no_live_ranks

        check_no_live_ranks(out)  # a killed launcher's ranks may still be writing
    except BaseException:
        lock.release()
        raise
    try:
        command = " ".join(sys.argv[:6]) or "python"
        (out / OWNER_FILE).write_text(f"pid {os.getpid()} on {socket.gethostname()}: {command}")
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


#: settings a resumed run must share with the checkpointed one (they shape the model,
#: the data or the optimizer); steps, ranks, nodes, device and saving may change
RESUME_MUST_MATCH = (
    "variant", "preset", "seq len", "local batch", "attention", "corpus", "lr",
)  # fmt: skip
RESUME_SPEC_MUST_MATCH = (
    "init", "tokenizer", "warmup_steps", "seed", "moe_impl", "mixed_precision",
)  # fmt: skip


def check_resume(out: Path, step: int, plan: Plan, share: tuple[int, int] | None = (0, 1)) -> None:
    """Refuse a resume whose settings differ from the checkpointed run's (named), a
    resume that would not train any further, and a damaged checkpoint (``share``: this
    rank's part of the shard hashing, None for none)."""
    from ..training.checkpoint import check_checkpoint

    check_checkpoint(out / "checkpoint" / f"step-{step}", share)
    spec = plan.spec
    if spec.steps <= step:
        raise ConfigError(
            f"the checkpoint in {out} is at step {step}; pass --steps above it to train on"
        )
    if share is None or share[0] == 0:
        note_metrics_gap(out, step)
    try:
        saved = json.loads((out / "run.json").read_text())
        saved_resolved, saved_spec = saved["resolved"], saved["spec"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # a folder from torchtitan's own entry point: nothing recorded to compare
    now, differences = plan.summary(), []
    for key in RESUME_MUST_MATCH:
        if key in saved_resolved and saved_resolved[key] != now[key]:
            differences.append(f"{key} {saved_resolved[key]!r} -> {now[key]!r}")
    for key in RESUME_SPEC_MUST_MATCH:
        if key in saved_spec and saved_spec[key] != getattr(spec, key):
            differences.append(f"{key} {saved_spec[key]!r} -> {getattr(spec, key)!r}")
    if differences:
        raise ConfigError(
            f"--resume would continue the run in {out} with other settings: "
            f"{'; '.join(differences)}. Pass the run's own settings again (only --steps, "
            "ranks, nodes and checkpointing may change), or start a new run elsewhere"
        )


def metrics_gap(out: Path, step: int) -> list[int]:
    """Steps 1..``step`` (those the checkpoint holds) that metrics.jsonl has no line for."""
    path = out / "metrics.jsonl"
    recorded = {r.get("step") for r in read_metrics(path)} if path.exists() else set()
    return [s for s in range(1, step + 1) if s not in recorded]


def note_metrics_gap(out: Path, step: int) -> None:
    """Say, before training, that a resumed run's metrics will have a hole: a
    metrics.jsonl cut to steps 1-2 and resumed at step 20 went on 1, 2, 21, 22 silently."""
    missing = metrics_gap(out, step)
    if not missing:
        return
    span = f"{missing[0]}-{missing[-1]}" if len(missing) > 1 else str(missing[0])
    whole = len(missing) == missing[-1] - missing[0] + 1
    print(
        f"note: {out / 'metrics.jsonl'} has no line for step{'s' if len(missing) > 1 else ''} "
        f"{span if whole else f'{span} ({len(missing)} of them)'}, though the checkpoint "
        f"at step {step} trained {'them' if len(missing) > 1 else 'it'} (the file was cut or "
        "edited): the resumed run's "
        "metrics go on from there, and loss curves will show the gap",
        file=sys.stderr,
        flush=True,
    )


def checkpoint_data_ranks(step_dir: Path) -> int | None:
    """How many data-parallel ranks wrote a checkpoint's dataloader state (None: unknown).

    Read from the checkpoint's own DCP metadata, the same on every rank, so every
    rank of a resumed run takes the same decision.
    """
    from torch.distributed.checkpoint import FileSystemReader

    try:
        keys = FileSystemReader(str(step_dir)).read_metadata().state_dict_metadata
    except Exception:  # not a DCP checkpoint (an HF export): nothing to compare
        return None
    ranks = [k for k in keys if k.startswith("dataloader.dp_rank_")]
    return len(ranks) or None


def resumes_at_other_world(out: Path, step: int, data_ranks: int, *, echo: bool) -> bool:
    """Whether the checkpoint at ``step`` had another data-parallel size (nodes lost or
    added, another --nproc).

    Model and optimizer state reshard on load (torch's distributed checkpoint); the
    data position cannot in torchtitan 0.3.0 (it asserts the size is unchanged), so
    the resumed run says so once and starts its data from the beginning.
    """
    saved = checkpoint_data_ranks(out / "checkpoint" / f"step-{step}")
    if saved is None or saved == data_ranks:
        return False
    if echo:
        print(
            f"note: the checkpoint at step {step} was written by {saved} data-parallel "
            f"ranks and this run has {data_ranks}: model and optimizer state are "
            "resharded, the data order restarts (torchtitan 0.3.0 cannot reshard its "
            "dataloader state)",
            file=sys.stderr,
            flush=True,
        )
    return True


def write_manifest(
    out: Path,
    status: str,
    plan: Plan,
    *,
    launched: bool,
    init_dir: Path | None = None,
    **extra: Any,
) -> None:
    """``run.json``: the spec as the job ran it, the resolved plan and how the run stands
    (rank 0 writes it). ``init_dir``: the folder the first weights came from."""
    info = {
        "status": status,
        # the ranks a launch leaves to torchrun are the job's, as torchrun counted them
        "spec": {**asdict(plan.spec), "nproc": plan.nproc, "nnodes": plan.nnodes},
        "resolved": plan.summary(),
        "shape": asdict(plan.shape),
        "init_dir": str(init_dir) if init_dir else None,
        "layout_reason": plan.layout_reason,
        # the torchrun agent that started this rank: its node writes loss.png
        "agent": [socket.gethostname(), os.getppid()] if launched else None,
        **extra,
    }
    (out / "run.json").write_text(strict_json(info, indent=2))
