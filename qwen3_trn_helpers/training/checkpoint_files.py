"""The files a checkpoint holds beside DCP's own: each shard's sha256, and the run's settings.

Each shard's sha256 is computed while DCP writes it (:class:`ShardWriter`), not by
reading back what was just written (a 48 GB checkpoint read again from FSx after every
save); the run's settings (and the tokens every rank together had trained) are written
before DCP's ``.metadata``, so a checkpoint that counts as complete always holds both.
Used by training/checkpoint.py's manager, whose synchronous and asynchronous saves both
go through :class:`ShardWriter`.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

SHA_SUFFIX = ".sha256"  # beside each shard: its sha256, written by the rank that saved it
#: beside each checkpoint's shards: the settings of the run that saved it
SETTINGS_FILE = "qwen3-trn-settings.json"


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

    def __init__(
        self,
        path: Any,
        *,
        settings: dict | None = None,
        tokens_seen: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(path, **kwargs)
        self.fs = HashingFileSystem()
        self.settings = dict(settings or {})
        self.tokens_seen = tokens_seen

    def finish(self, metadata: Any, results: Any) -> None:
        record_run_settings(Path(self.path), self.settings, tokens_seen=self.tokens_seen)
        super().finish(metadata, results)


def record_run_settings(step_dir: Path, settings: dict, *, tokens_seen: int | None = None) -> None:
    """Rank 0 writes the run's settings into a checkpoint it saves: what a resume is
    checked against when run.json is missing or damaged (it had silently resumed a
    256-token run at 64 tokens). Split as run.json splits them: the resolved plan, and
    each flag as given (``same_on_every_node`` names them ``--seq-len``, ...). Called
    by the writer's ``finish``, which only the coordinator (rank 0) runs."""
    from .metrics_file import strict_json, write_atomically

    if not settings:
        return
    record: dict[str, Any] = {
        "resolved": {k: v for k, v in settings.items() if not k.startswith("--")},
        "spec": {k[2:].replace("-", "_"): v for k, v in settings.items() if k.startswith("--")},
    }
    if tokens_seen is not None:  # every rank's together (the trainer's own is one rank's)
        record["tokens_seen"] = tokens_seen
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
