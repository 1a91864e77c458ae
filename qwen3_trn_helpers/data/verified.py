"""Hash a prepared corpus once per run folder, not at every start of every node.

Why: a run on a prepared corpus checks each shard's sha256 before training (a damaged
copy is a one-line error, not a wrong run). Every node did, at every start: a 2B-token
corpus is ~8 GB, and 16 nodes reading it all from an FSx that serves 293 MB/s took about
7 minutes per requeue, which also spread the nodes' start times.

So the launch keeps a record in the run folder (``.data-verified.json``, the job's
shared storage) of the shards it hashed, each with the file's size, modification and
change times and inode as they were when hashed. A shard whose file still shows the
same is not read again; any write to it changes its change time (ctime, which no user
can set back), so a changed, replaced or re-copied shard is hashed again. The record is
written under a lock (``flock``, as run folders are held), so the nodes of a job that
start together hash once: the first holds the lock while it reads, the others then find
the record. ``--verify-data`` reads every shard again (a disk that silently flipped a
bit keeps its times).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

#: in a run folder: the shards hashed there, and as what files
RECORD = ".data-verified.json"
LOCK = ".data-verified.lock"


def stamp(path: Path) -> list[int]:
    """What changes when a file's bytes do: size, mtime, ctime (ns) and inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def record_folder(out: str | Path | None) -> Path | None:
    """The run folder that keeps the record, made if need be; None without ``--out``
    (a new folder each run: nothing to remember) or where it cannot be made."""
    if out is None:
        return None
    folder = Path(out).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # (a file of that name, no rights: the run itself says so)
        return None
    return folder


def _read(record: Path) -> dict[str, Any]:
    try:
        kept = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or cut short: hash again
    return kept if isinstance(kept, dict) else {}


def _entry(corpus: Path, shard: dict[str, Any]) -> dict[str, Any]:
    return {"sha256": shard["sha256"], "stamp": stamp(corpus / shard["file"])}


@contextmanager
def shards_to_hash(
    corpus: Path, shards: list[dict[str, Any]], out: str | Path | None, *, reread: bool = False
) -> Iterator[list[dict[str, Any]]]:
    """The manifest's ``shards`` still to hash, for the ``with`` block: all of them
    without a record (``out`` None) or with ``reread``, else those whose files changed
    since the record was written. The block hashes them and raises on a mismatch; when
    it ends cleanly the record says every shard is sound as its file is now.
    """
    from filelock import FileLock

    out = record_folder(out)  # (made here, when a prepared corpus is hashed)
    with FileLock(str(out / LOCK)) if out is not None else nullcontext():  # (blocks)
        kept = {} if out is None else _read(out / RECORD)
        key = str(corpus.resolve())
        known = {} if reread else kept.get(key, {})
        yield [shard for shard in shards if known.get(shard["file"]) != _entry(corpus, shard)]
        if out is not None:
            kept[key] = {shard["file"]: _entry(corpus, shard) for shard in shards}
            partial = out / f"{RECORD}.partial"
            try:
                partial.write_text(json.dumps(kept, indent=1) + "\n")
                os.replace(partial, out / RECORD)
            except OSError:
                pass  # (a full or read-only folder: the next start hashes again)
