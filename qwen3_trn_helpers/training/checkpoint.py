"""torchtitan's checkpointer, with failures a user can read: which step, why, what to do.

torch's distributed checkpoint reports a failed save or load as ``CheckpointException``,
a ``BaseException`` (so ``except Exception`` misses it) wrapping each rank's error, and
the user sees a 60-line traceback. Our subclass of torchtitan's ``CheckpointManager``
(chosen through its Config, as torchtitan's own registries choose components) turns
that into one :class:`~qwen3_trn_helpers.errors.TrainingError` naming the step and the
cause; a Ctrl-C that arrives during a save stays a Ctrl-C. A damaged checkpoint is
caught before anything is built (:func:`check_checkpoint`), from DCP's own metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchtitan.components.checkpointer import CheckpointManager

from ..errors import RunFolderError, TrainingError


def _root_cause(error: BaseException) -> BaseException:
    """The first rank's own exception inside a CheckpointException, else ``error``."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        wrapped = next(iter(failures.values()))
        inner = wrapped[0] if isinstance(wrapped, tuple) else wrapped
        if isinstance(inner, BaseException):
            return inner
    return error


def _interrupted(error: BaseException) -> bool:
    """Whether any rank's failure in a CheckpointException is a Ctrl-C (or SIGTERM), or
    this process was asked to stop: the other ranks' errors are then its consequence."""
    from ..errors import stop_signal

    failures = getattr(error, "failures", None)
    inner = [f[0] if isinstance(f, tuple) else f for f in (failures or {}).values()]
    return stop_signal() is not None or any(
        isinstance(e, KeyboardInterrupt) for e in [error, *inner]
    )


def _reason(error: BaseException) -> str:
    cause = _root_cause(error)
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


class Qwen3TrnCheckpointManager(CheckpointManager):
    """torchtitan's DCP CheckpointManager; failures become one line with the step."""

    @dataclass(kw_only=True, slots=True)
    class Config(CheckpointManager.Config):
        pass

    #: save at the next ``save()`` whatever the interval (a stop was requested:
    #: training/stopping.py); torchtitan's own rule otherwise
    save_now: bool = False
    #: the run's settings (trainer.same_on_every_node), saved with each checkpoint so a
    #: resume can be checked even when run.json is lost (set by the trainer; {}: none)
    run_settings: dict = {}  # noqa: RUF012 (replaced, never mutated)

    def _should_save(self, curr_step: int, last_step: bool = False) -> bool:
        if self.save_now and self.enable and not self.load_only:
            return True
        return super()._should_save(curr_step, last_step)

    # torchtitan's base class guards the public save/load (enabled or not) and asks
    # subclasses to override these hooks instead
    def _save(self, curr_step: int, last_step: bool = False) -> bool:
        try:
            saved = super()._save(curr_step, last_step)
            if saved:
                step_dir = Path(self.folder) / f"step-{curr_step}"
                record_shard_checksums(step_dir)
                record_run_settings(step_dir, self.run_settings)
            return saved
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:
            if _interrupted(e):
                raise KeyboardInterrupt from None  # Ctrl-C during the save: a Ctrl-C
            raise TrainingError(
                f"saving the checkpoint of step {curr_step} into {self.folder} failed "
                f"({_reason(e)}); metrics.jsonl holds every step so far. Free disk space or "
                "make the folder writable, then --resume from the last complete checkpoint",
                step=curr_step,
            ) from None

    def _load(self, step: int = -1) -> bool:
        try:
            return super()._load(step)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:
            if _interrupted(e):
                raise KeyboardInterrupt from None
            which = f"step {step}" if step != -1 else "the newest checkpoint"
            raise TrainingError(
                f"loading {which} from {self.folder} failed ({_reason(e)}); the checkpoint "
                "is damaged or was written by a run of another shape: delete that step-N "
                "folder to resume from an earlier one, or start a new run (--overwrite)"
            ) from None


SHA_SUFFIX = ".sha256"  # beside each shard: its sha256, written by the rank that saved it


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def record_shard_checksums(step_dir: Path) -> None:
    """Each rank hashes the shard files it wrote (DCP names them ``__RANK_N.distcp``),
    in parallel, so a resume can tell a shard whose bytes changed (DCP keeps sizes and
    offsets, no checksums). An HF export (no ``.metadata``) is left alone."""
    from ..checksums import sha256_of

    if not (step_dir / ".metadata").is_file():
        return
    rank, _ = _rank_and_world()
    for shard in step_dir.glob(f"__{rank}_*.distcp"):
        (step_dir / (shard.name + SHA_SUFFIX)).write_text(sha256_of(shard))


#: beside each checkpoint's shards: the settings of the run that saved it
SETTINGS_FILE = "qwen3-trn-settings.json"


def record_run_settings(step_dir: Path, settings: dict) -> None:
    """Rank 0 writes the run's settings into a checkpoint it saved: what a resume is
    checked against when run.json is missing or damaged (it had silently resumed a
    256-token run at 64 tokens). Split as run.json splits them: the resolved plan, and
    each flag as given (``same_on_every_node`` names them ``--seq-len``, ...)."""
    from .metrics_file import strict_json, write_atomically

    rank, _ = _rank_and_world()
    if rank != 0 or not settings or not (step_dir / ".metadata").is_file():
        return
    record = {
        "resolved": {k: v for k, v in settings.items() if not k.startswith("--")},
        "spec": {k[2:].replace("-", "_"): v for k, v in settings.items() if k.startswith("--")},
    }
    write_atomically(step_dir / SETTINGS_FILE, strict_json(record, indent=2))


def read_run_settings(step_dir: Path) -> dict | None:
    """The settings a checkpoint recorded (:func:`record_run_settings`), or None: a
    checkpoint from an older qwen3-trn or torchtitan's own entry point records none."""
    import json

    try:
        record = json.loads((step_dir / SETTINGS_FILE).read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and all(
        isinstance(record.get(k), dict) for k in ("resolved", "spec")
    )
    return record if ok else None


def check_checkpoint(step_dir: Path, share: tuple[int, int] | None = (0, 1)) -> None:
    """Refuse a checkpoint whose files do not hold what its DCP metadata says.

    DCP's ``.metadata`` lists, for every tensor, the file and byte range it lives in; a
    missing or truncated shard (a full disk, a copy cut short) shows there before any
    model is built. Shards whose bytes changed are found by the sha256 each saving rank
    wrote beside its shard; ``share`` = (rank, world) splits that hashing over the
    ranks (file i is this rank's when i % world == rank), None skips it.
    """
    from torch.distributed.checkpoint import FileSystemReader

    from ..checksums import sha256_of

    if not (step_dir / ".metadata").is_file():
        if (step_dir / "model.safetensors.index.json").is_file():
            raise RunFolderError(
                f"{step_dir} is a Hugging Face export (--export-hf), not a training "
                f"checkpoint; start a new run from its weights with --init {step_dir}"
            )
        raise RunFolderError(f"{step_dir} has no .metadata: not a complete checkpoint")
    try:
        storage = FileSystemReader(str(step_dir)).read_metadata().storage_data
    except Exception as e:
        raise RunFolderError(
            f"the checkpoint metadata {step_dir / '.metadata'} is unreadable ({e}); delete "
            f"{step_dir} to resume from an earlier checkpoint"
        ) from None
    needed: dict[str, int] = {}
    for info in storage.values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for i, (name, end) in enumerate(sorted(needed.items())):
        path = step_dir / name
        size = path.stat().st_size if path.is_file() else None
        what = None
        if size is None or size < end:
            what = "is missing" if size is None else f"has {size:,} bytes, not {end:,}"
        elif share is not None and i % share[1] == share[0]:
            recorded = step_dir / (name + SHA_SUFFIX)
            if recorded.is_file() and recorded.read_text().strip() != sha256_of(path):
                what = "does not match the sha256 recorded when it was saved"
        if what:
            raise RunFolderError(
                f"checkpoint {step_dir} is damaged: {name} {what}; delete {step_dir} to "
                "resume from an earlier checkpoint, or start a new run (--overwrite)"
            )
