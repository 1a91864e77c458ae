"""torchtitan's checkpointer, with failures a user can read: which step, why, what to do.

torch's distributed checkpoint reports a failed save or load as ``CheckpointException``,
a ``BaseException`` (so ``except Exception`` misses it) wrapping each rank's error, and
the user sees a 60-line traceback. Our subclass of torchtitan's ``CheckpointManager``
(chosen through its Config, as torchtitan's own registries choose components) turns
that into one :class:`~qwen3_trn_helpers.errors.TrainingError` naming the step and the
cause; a Ctrl-C that arrives during a save stays a Ctrl-C. A damaged checkpoint is
caught before anything is built (:func:`check_checkpoint`), from DCP's own metadata,
and a resume falls back to the newest complete checkpoint before it
(:func:`newest_complete_step`), saying so in one ``note:`` line: a job requeued onto a
damaged newest checkpoint would otherwise fail every attempt.

Each shard's sha256 is computed while DCP writes it (:class:`ShardWriter`), not by
reading back what was just written (a 48 GB checkpoint read again from FSx after every
save); the run's settings are written before DCP's ``.metadata``, so a checkpoint that
counts as complete always holds both. The same writer serves torchtitan's synchronous
and asynchronous saves (``--checkpoint-async``), whose files exist only once the
background write is done.
"""

from __future__ import annotations

import hashlib
import io
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem
from torchtitan.components.checkpointer import CheckpointManager

from ..errors import RunFolderError, TrainingError
from .save_log import note_save


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


def last_save_skips_purge() -> bool:
    """Whether torchtitan's ``_save`` returns after the last step's save before its
    purge (0.3.0, components/checkpointer/dcp.py: ``if last_step: self._save_last_step
    (...); return True``), so ``keep_latest_k`` k left k + 1 checkpoints at the end of
    every run (5 steps, interval 1, k 2: step-3, step-4 and step-5). The version gate of
    our purge after that save: a torchtitan that purges there itself gets none from us.
    """
    import inspect

    source = inspect.getsource(CheckpointManager._save)
    start = source.find("self._save_last_step(")
    if start < 0:
        return False
    end = source.find("return True", start)
    return end > 0 and "_purge_stale_checkpoints" not in source[start:end]


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

    def __init__(self, config: Config, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        pg = getattr(self, "pg", None)
        if pg is not None:  # --checkpoint-async: its own gloo group waits out a long save
            import torch.distributed as dist

            from .stopping import collective_timeout_s

            # (the whole model's bytes, never fewer: one rank's share is written at once)
            timeout = max(collective_timeout_s(_state_bytes(self)), 1800)  # (gloo's default)
            dist.set_timeout(_timedelta(timeout), pg)

    @torch.no_grad()
    def dcp_save(
        self,
        state_dict: dict[str, Any],
        checkpoint_id: str,
        async_mode: Any,
        enable_garbage_collection: bool = False,
        to_hf: bool = False,
    ):
        """torchtitan's save, through :class:`ShardWriter` (hashes as it writes, and
        the run's settings before ``.metadata``); a Hugging Face export is torchtitan's
        own. The three modes are torchtitan 0.3.0's ``dcp_save``: ``dcp.save``, or
        ``dcp.async_save`` on the checkpointer's gloo group (a thread; with pinned
        memory, a process and torchtitan's stager)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
        from torchtitan.components.checkpoint import AsyncMode
        from torchtitan.tools.utils import GarbageCollection

        if to_hf:
            return super().dcp_save(
                state_dict, checkpoint_id, async_mode, enable_garbage_collection, to_hf
            )
        writer = ShardWriter(checkpoint_id, settings=self.run_settings)
        if async_mode == AsyncMode.ASYNC:
            ret = dcp.async_save(state_dict, storage_writer=writer, process_group=self.pg)
        elif async_mode == AsyncMode.ASYNC_WITH_PINNED_MEM:
            ret = dcp.async_save(
                state_dict,
                storage_writer=writer,
                process_group=self.pg,
                async_checkpointer_type=AsyncCheckpointerType.PROCESS,
                async_stager=self.stager,
            )
        else:
            ret = dcp.save(state_dict, storage_writer=writer)
        if enable_garbage_collection:
            GarbageCollection.collect("GC collection invoked by checkpointer.")
        return ret

    def _find_load_step(self, folder: str = "") -> int:
        """The newest *complete* checkpoint (:func:`newest_complete_step`): torchtitan's
        own pick skips only folders without ``.metadata``. The same files give every
        rank the same answer; the resume's settling said which step, once."""
        newest = super()._find_load_step(folder)
        if newest <= 0:
            return newest
        # (none complete: torchtitan's pick, whose load then fails in one line)
        return newest_complete_step(Path(folder or self.folder), newest, echo=False) or newest

    # torchtitan's base class guards the public save/load (enabled or not) and asks
    # subclasses to override these hooks instead
    def _save(self, curr_step: int, last_step: bool = False) -> bool:
        try:
            began = time.monotonic()
            saved = super()._save(curr_step, last_step)
            if saved:  # its seconds to storage, for the next job's sizing (save_log.py)
                note_save(self, curr_step, began)
            if saved and last_step and last_save_skips_purge():
                self._purge_stale_checkpoints()  # (torchtitan's thread; close() joins it)
            if saved and self.save_now:
                # a stop request's save is on storage before the rank exits, async or not
                self.maybe_wait_for_saving()
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
#: beside each checkpoint's shards: the settings of the run that saved it
SETTINGS_FILE = "qwen3-trn-settings.json"


def _timedelta(seconds: float):
    from datetime import timedelta

    return timedelta(seconds=seconds)


def _state_bytes(manager: CheckpointManager) -> int:
    """Bytes of the model's parameters x the checkpoint's bytes per parameter."""
    from .stopping import checkpoint_bytes

    params = 0
    for part in manager.states["model"].model:
        params += sum(p.numel() for p in part.parameters())
    return checkpoint_bytes(params)


class _HashingStream(io.RawIOBase):
    """A shard's file, hashed as DCP writes it (DCP asks only write, tell, flush,
    fileno and close of it)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.sha256.update(b)
        return self._raw.write(b)

    def tell(self) -> int:
        return self._raw.tell()

    def flush(self) -> None:
        self._raw.flush()

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        if not self.closed:
            super().close()  # (flushes, through the file: still open here)
            self._raw.close()


class HashingFileSystem(FileSystem):
    """DCP's local file system, writing ``SHARD.sha256`` beside each shard it writes."""

    @contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        if "w" not in mode or not str(path).endswith(".distcp"):
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with super().create_stream(path, mode) as raw:
            stream = _HashingStream(raw)
            yield stream
        Path(str(path) + SHA_SUFFIX).write_text(stream.sha256.hexdigest())


class ShardWriter(FileSystemWriter):
    """torch's FileSystemWriter, hashing each shard as it is written and recording the
    run's settings (:func:`record_run_settings`) before rank 0 writes ``.metadata``:
    each shard's sha256 without reading it back, and a checkpoint that counts as
    complete (``.metadata`` exists) holds its settings. Picklable, for torchtitan's
    process-based async save."""

    def __init__(self, path: Any, *, settings: dict | None = None, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.fs = HashingFileSystem()
        self.settings = dict(settings or {})

    def finish(self, metadata: Any, results: Any) -> None:
        record_run_settings(Path(self.path), self.settings)
        super().finish(metadata, results)


def record_run_settings(step_dir: Path, settings: dict) -> None:
    """Rank 0 writes the run's settings into a checkpoint it saves: what a resume is
    checked against when run.json is missing or damaged (it had silently resumed a
    256-token run at 64 tokens). Split as run.json splits them: the resolved plan, and
    each flag as given (``same_on_every_node`` names them ``--seq-len``, ...). Called
    by the writer's ``finish``, which only the coordinator (rank 0) runs."""
    from .metrics_file import strict_json, write_atomically

    if not settings:
        return
    record = {
        "resolved": {k: v for k, v in settings.items() if not k.startswith("--")},
        "spec": {k[2:].replace("-", "_"): v for k, v in settings.items() if k.startswith("--")},
    }
    write_atomically(step_dir / SETTINGS_FILE, strict_json(record, indent=2))


def read_run_settings(step_dir: Path) -> dict | None:
    """The settings a checkpoint recorded (:func:`record_run_settings`), or None: a
    checkpoint from an older qwen3-trn or torchtitan's own entry point records none."""
    from ..files import read_json
    from .metrics_file import RECORD_LIMIT

    try:  # (a pipe, a device, bytes, JSON too deep: none recorded, as files.py reads it)
        record = read_json(step_dir / SETTINGS_FILE, limit=RECORD_LIMIT, fix="")
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and all(
        isinstance(record.get(k), dict) for k in ("resolved", "spec")
    )
    return record if ok else None


def checkpoint_damage(step_dir: Path, share: tuple[int, int] | None = None) -> str | None:
    """What makes ``step_dir`` no complete checkpoint, in a few words; None if sound.

    DCP's ``.metadata`` lists, for every tensor, the file and byte range it lives in; a
    missing or truncated shard (a full disk, a copy cut short) shows there before any
    model is built. Shards whose bytes changed are found by the sha256 each saving rank
    wrote beside its shard; ``share`` = (rank, world) splits that hashing over the
    ranks (file i is this rank's when i % world == rank), None skips it.
    """
    from torch.distributed.checkpoint import FileSystemReader

    from ..checksums import sha256_of

    if not (step_dir / ".metadata").is_file():
        return "has no .metadata (a save that never finished)"
    try:
        storage = FileSystemReader(str(step_dir)).read_metadata().storage_data
    except Exception as e:
        return f"has an unreadable .metadata ({type(e).__name__})"
    needed: dict[str, int] = {}
    for info in storage.values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for i, (name, end) in enumerate(sorted(needed.items())):
        path = step_dir / name
        size = path.stat().st_size if path.is_file() else None
        if size is None:
            return f"{name} is missing"
        if size < end:
            return f"{name} has {size:,} bytes, not {end:,}"
        if share is not None and i % share[1] == share[0]:
            recorded = step_dir / (name + SHA_SUFFIX)
            if recorded.is_file() and recorded.read_text().strip() != sha256_of(path):
                return f"{name} does not match the sha256 recorded when it was saved"
    return None


def check_checkpoint(step_dir: Path, share: tuple[int, int] | None = (0, 1)) -> None:
    """Refuse a checkpoint whose files do not hold what its DCP metadata says
    (:func:`checkpoint_damage`), in one line naming the file and the fix."""
    if (
        not (step_dir / ".metadata").is_file()
        and (step_dir / "model.safetensors.index.json").is_file()
    ):
        raise RunFolderError(
            f"{step_dir} is a Hugging Face export (--export-hf), not a training "
            f"checkpoint; start a new run from its weights with --init {step_dir}"
        )
    damage = checkpoint_damage(step_dir, share)
    if damage is None:
        return
    if damage.startswith("has no .metadata"):
        raise RunFolderError(f"{step_dir} has no .metadata: not a complete checkpoint")
    if damage.startswith("has an unreadable"):
        raise RunFolderError(
            f"the checkpoint metadata {step_dir / '.metadata'} is unreadable; delete "
            f"{step_dir} to resume from an earlier checkpoint"
        )
    raise RunFolderError(
        f"checkpoint {step_dir} is damaged: {damage}; delete {step_dir} to resume from an "
        "earlier checkpoint, or start a new run (--overwrite)"
    )


def _step_folders(folder: Path) -> list[int]:
    """The steps of ``folder``'s ``step-N`` folders, newest first."""
    import re

    steps = []
    for entry in folder.iterdir() if folder.is_dir() else []:
        found = re.fullmatch(r"step-(\d+)", entry.name)
        if found and entry.is_dir():
            steps.append(int(found.group(1)))
    return sorted(steps, reverse=True)


def newest_complete_step(folder: Path, newest: int, *, echo: bool, set_aside: bool = False) -> int:
    """The newest checkpoint in ``folder`` (a run's ``checkpoint``), at or before step
    ``newest``, whose files hold what its metadata says (0: none).

    A newest checkpoint that lost a shard, was cut short or lost its metadata is passed
    over for the one before it, and (``echo``) one ``note:`` line says which and why:
    a requeued job resumes instead of failing on it every time. The check reads
    metadata and file sizes only; the same files give every rank the same answer.
    ``set_aside`` (the run folder's writer): each damaged one is renamed
    ``damaged-N``, out of torchtitan's sight (it reads ``step-N``), so the resumed run
    writes its step N afresh and never keeps (``--keep-checkpoints``) or loads it.
    """
    skipped: list[str] = []
    damaged: list[str] = []
    for step in _step_folders(folder):
        if step > newest:
            continue
        step_dir = folder / f"step-{step}"
        if not (step_dir / ".metadata").is_file():
            continue  # a save cut short: torchtitan never counts it either
        damage = checkpoint_damage(step_dir)
        if damage is None:
            if skipped and echo:
                aside = f"; set aside as {folder.name}/damaged-N" if set_aside else ""
                print(
                    f"note: the newest checkpoint is damaged ({'; '.join(skipped)}{aside}): "
                    f"resuming from step-{step}, the newest complete one",
                    file=sys.stderr,
                    flush=True,
                )
            if set_aside:
                for name in damaged:
                    target, n = folder / name.replace("step-", "damaged-"), 1
                    while target.exists():
                        target, n = folder / f"{name.replace('step-', 'damaged-')}.{n}", n + 1
                    (folder / name).rename(target)
            return step
        skipped.append(f"step-{step}: {damage}")
        damaged.append(step_dir.name)
    return 0
