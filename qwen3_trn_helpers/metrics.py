"""Per-step metrics: one JSON line per completed step, flushed as the step ends.

We do not time anything ourselves: torchtitan's ``MetricsProcessor`` already measures
loss, grad norm, throughput and step time and hands them to its loggers (TensorBoard,
W&B) through the ``BaseLogger`` interface. :class:`JsonlMetricsLogger` is one more such
logger. Because each line is written and flushed when its step completes, an interrupted
run leaves a valid file holding every completed step.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchtitan.components.metrics import BaseLogger

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


class JsonlMetricsLogger(BaseLogger):
    """A torchtitan metrics logger that appends each step to ``metrics.jsonl``."""

    def __init__(
        self,
        path: Path,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        with_mfu: bool = True,
    ):
        self.path = Path(path)
        self.with_mfu = with_mfu
        self.records: list[dict[str, Any]] = []
        self._file = open(self.path, "a", encoding="utf-8")
        self._on_step = on_step

    def log(self, metrics: dict[str, Any], step: int) -> None:
        record = to_record(step, metrics, self.with_mfu)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records.append(record)
        if self._on_step is not None:
            self._on_step(record)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


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
