"""How long each checkpoint took to reach storage, as measured: one line per save.

A job sizes its saves (how often, how many kept) from the checkpoint's size and the
storage's write rate (ops/jobs/saves.py). The rate a file system is provisioned for
is a figure on paper; what a run's own saves took is the measured one. So rank 0
appends, once a save is on storage (an asynchronous one: when its background write has
finished), ``{"step", "bytes", "seconds", "mode"}`` to ``saves.jsonl`` in the checkpoint
folder, and the next job file written for that run folder reads it back
(:func:`measured_write_mb_s`). Recording never fails a run: an unwritable line is
passed over. Cheap to import: no torch at module level.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from ..files import KiB, parse_json, read_lines

#: in a run's checkpoint folder, beside torchtitan's step-N folders (which its purge
#: and its load step search match by name, so this file is left alone)
SAVE_LOG = "saves.jsonl"


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def note_save(manager: Any, step: int, began: float) -> None:
    """After ``manager`` (a torchtitan CheckpointManager) saved ``step``, on rank 0:
    log its bytes and seconds once they are on storage."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() != 0:
        return
    folder = Path(manager.folder)
    mode = getattr(getattr(manager, "async_mode", None), "value", "disabled")

    def write(*_: Any) -> None:
        seconds = time.monotonic() - began
        try:
            line = {"step": step, "bytes": _folder_bytes(folder / f"step-{step}"),
                    "seconds": round(seconds, 3), "mode": mode}  # fmt: skip
            with open(folder / SAVE_LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        except OSError:
            pass  # a log of timings: never the reason a run fails

    future = getattr(manager, "save_future", None)
    if future is None:
        write()
    else:  # (async: torchtitan waits on this future before its next save)
        future.add_done_callback(write)


def measured_write_mb_s(out: str | Path) -> tuple[float, int] | None:
    """The median MB/s of the saves logged in run folder ``out`` (and how many), or
    None where none was (a new run, or one that never saved)."""
    path = Path(out) / "checkpoint" / SAVE_LOG
    rates = []
    try:  # (files.py: no pipe, no device, no line read whole past 64 KiB)
        lines = [raw for _, raw in read_lines(path, fix="", line_limit=64 * KiB)]
    except (OSError, ValueError):
        return None
    for raw in lines:
        try:
            entry = parse_json(raw or b"", path, "")
            nbytes, seconds = int(entry["bytes"]), float(entry["seconds"])
        except (ValueError, KeyError, TypeError):
            continue
        if nbytes > 0 and seconds > 0:
            rates.append(nbytes / seconds / 1e6)
    return (statistics.median(rates), len(rates)) if rates else None
