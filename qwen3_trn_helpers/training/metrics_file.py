"""The metrics.jsonl file: one JSON line per completed training step.

Kept apart from training/metrics.py (which subclasses torchtitan's MetricsProcessor and
so imports torch) because the notebook kernel and the parent of a launched run only
read this file, and should not pay for importing torch and torchtitan to do so.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from ..files import KiB, MiB, UnreadableFile, parse_json, read_lines

#: a metrics line's length at most (one is about 300 bytes); a longer one is unreadable
LINE_LIMIT = 64 * KiB
#: run.json's and a checkpoint's settings' size at most (each is a few KiB)
RECORD_LIMIT = 16 * MiB

#: torchtitan metric key -> our short name.
KEYS = {
    "loss_metrics/global_avg_loss": "loss",
    "grad_norm": "grad_norm",
    "throughput(tps)": "tokens_per_s",
    "time_metrics/end_to_end(s)": "step_time_s",
    "tflops": "tflops",
    "mfu(%)": "mfu_pct",
    "memory/max_reserved(GiB)": "memory_gib",
    "n_tokens_seen": "tokens_seen",
}


def to_record(step: int, metrics: dict[str, Any], with_mfu: bool = True) -> dict[str, Any]:
    record: dict[str, Any] = {"step": step}
    for key, name in KEYS.items():
        if name == "mfu_pct" and not with_mfu:
            continue
        if key in metrics:
            value = metrics[key]
            if name == "tokens_seen":
                record[name] = int(value)
            else:  # JSON has no NaN/inf: write null so every line stays valid JSON
                value = float(value)
                record[name] = value if math.isfinite(value) else None
    lrs = [v for k, v in metrics.items() if k.startswith("lr/")]
    if lrs:
        record["lr"] = float(lrs[0])
    return record


def finite(value: Any) -> Any:
    """``value`` with every NaN/inf float (at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def strict_json(value: Any, **options: Any) -> str:
    """JSON every reader accepts: Python's ``json`` writes NaN/Infinity, which is not JSON
    (JavaScript, jq, pandas' strict mode reject it). A measurement that is not a number
    becomes null."""
    return json.dumps(finite(value), allow_nan=False, **options)


def scan_metrics(path: str | Path) -> tuple[list[dict[str, Any]], list[int]]:
    """(every valid record, the numbers of the lines that are not one) of a metrics file.

    A valid record is a line of JSON holding an object with an integer ``step``. Every
    other line (a torn last line, garbage, bytes that are not UTF-8) is passed over, not
    taken as the end of the file: a bad line between steps 3 and 4 had hidden steps 4 and
    on, which the next resume then deleted.
    """
    records, unreadable = [], []
    fix = "it is not a run's metrics file: move it away, or choose another --out"
    for lineno, raw in read_lines(path, fix=fix, line_limit=LINE_LIMIT):
        if raw is not None and not raw.strip():
            continue
        try:  # (a line too long, not UTF-8, not JSON or nested too deep: unreadable)
            record = None if raw is None else parse_json(raw, f"{path}:{lineno}", fix)
        except UnreadableFile:
            record = None
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 1:
            records.append(record)
        else:
            unreadable.append(lineno)
    return records, unreadable


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every valid line of a metrics file (a torn or damaged line is passed over)."""
    return scan_metrics(path)[0]


def keep_steps_before(path: str | Path, first_step: int) -> None:
    """Drop the lines for ``first_step`` and later, and any unreadable line, atomically.

    A fresh run (first step 1) starts an empty file; a run resumed from the checkpoint
    at step N keeps steps 1..N and does not repeat the ones it trains again. On a full
    disk the file keeps what it had (:func:`write_atomically`).
    """
    path = Path(path)
    kept = read_metrics(path) if path.exists() else []
    kept = [r for r in kept if r["step"] < first_step]
    write_atomically(path, "".join(strict_json(r) + "\n" for r in kept))


def free_space(folder: str | Path) -> str:
    """The free space where ``folder`` lies, for a message ("0 B", "1.5 MiB")."""
    import shutil

    try:
        free = float(shutil.disk_usage(folder).free)
    except OSError:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if free < 1024 or unit == "GiB":
            return f"{free:.0f} {unit}" if unit == "B" else f"{free:.1f} {unit}"
        free /= 1024
    return "unknown"  # (not reached)


def write_failed(path: Path, error: OSError, kept: str) -> str:
    """The one line for a file that could not be written: which file, why, the free
    space there and what was kept (a full disk was ``unexpected OSError: [Errno 28]``)."""
    import errno

    why = error.strerror or str(error)
    fix = (
        "free some space"
        if error.errno in (errno.ENOSPC, errno.EDQUOT)
        else "make the folder writable"
    )
    return (
        f"writing {path} failed ({why}; {free_space(path.parent)} free there): {kept}; "
        f"{fix}, then --resume from the last checkpoint (or run again)"
    )


def write_all(fd: int, data: bytes) -> None:
    """``data`` written to ``fd`` whole (os.write may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text``, or (a full disk, a read-only folder) what it held before:
    written beside it, synced, then renamed over it. Raises :class:`RunFolderError`."""
    from ..errors import RunFolderError

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise RunFolderError(write_failed(path, e, f"{path.name} keeps what it held")) from None


def _spans(numbers: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"`` (at most a few spans, then how many more)."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in spans[:4]]
    if len(spans) > 4:
        text.append(f"... ({len(numbers)} in all)")
    return ", ".join(text)


def note_metrics_gap(path: Path, step: int) -> None:
    """Say, in one line before training, that a resumed run's metrics will have a hole
    (steps the checkpoint trained that the file has no line for) or held lines it cannot
    read (dropped now): a metrics.jsonl cut to steps 1-2 and resumed at step 20 went on
    1, 2, 21, 22 silently."""
    if path.exists():
        records, unreadable = scan_metrics(path)
    else:
        records, unreadable = [], []
    recorded = {r["step"] for r in records}
    missing = [s for s in range(1, step + 1) if s not in recorded]
    if not missing and not unreadable:
        return
    parts = []
    if missing:
        many = len(missing) > 1
        parts.append(
            f"has no line for step{'s' if many else ''} {_spans(missing)}, though the "
            f"checkpoint at step {step} trained {'them' if many else 'it'} (the file was "
            "cut or edited)"
        )
    if unreadable:
        many = len(unreadable) > 1
        parts.append(
            f"{'and ' if missing else ''}holds {len(unreadable)} unreadable line"
            f"{'s' if many else ''} (line{'s' if many else ''} {_spans(unreadable)}: not a "
            "JSON step record), dropped now; every valid line is kept"
        )
    print(
        f"note: {path} {'; '.join(parts)}: the resumed run's metrics go on from step "
        f"{step + 1}{', and loss curves will show the gap' if missing else ''}",
        file=sys.stderr,
        flush=True,
    )
