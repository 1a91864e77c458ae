"""The metrics.jsonl file: one JSON line per completed training step.

Kept apart from training/metrics.py (which subclasses torchtitan's MetricsProcessor and
so imports torch) because the notebook kernel and the parent of a launched run only
read this file, and should not pay for importing torch and torchtitan to do so.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

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


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every complete line of a metrics file (a torn last line is ignored)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


def keep_steps_before(path: str | Path, first_step: int) -> None:
    """Drop the lines for ``first_step`` and later, atomically.

    A fresh run (first step 1) starts an empty file; a run resumed from the checkpoint
    at step N keeps steps 1..N and does not repeat the ones it trains again.
    """
    path = Path(path)
    kept = read_metrics(path) if path.exists() else []
    kept = [r for r in kept if r.get("step", 0) < first_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(strict_json(r) + "\n" for r in kept))
    tmp.replace(path)


def metrics_gap(path: Path, step: int) -> list[int]:
    """Steps 1..``step`` (those a checkpoint holds) that the file has no line for."""
    recorded = {r.get("step") for r in read_metrics(path)} if path.exists() else set()
    return [s for s in range(1, step + 1) if s not in recorded]


def note_metrics_gap(path: Path, step: int) -> None:
    """Say, before training, that a resumed run's metrics will have a hole: a
    metrics.jsonl cut to steps 1-2 and resumed at step 20 went on 1, 2, 21, 22 silently."""
    missing = metrics_gap(path, step)
    if not missing:
        return
    span = f"{missing[0]}-{missing[-1]}" if len(missing) > 1 else str(missing[0])
    whole = len(missing) == missing[-1] - missing[0] + 1
    print(
        f"note: {path} has no line for step{'s' if len(missing) > 1 else ''} "
        f"{span if whole else f'{span} ({len(missing)} of them)'}, though the checkpoint "
        f"at step {step} trained {'them' if len(missing) > 1 else 'it'} (the file was cut or "
        "edited): the resumed run's "
        "metrics go on from there, and loss curves will show the gap",
        file=sys.stderr,
        flush=True,
    )
