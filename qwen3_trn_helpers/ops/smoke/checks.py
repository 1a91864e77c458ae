"""What a training rung's run must show to pass, read back from its folder, and what
the full-size rung can check on this machine (the hub, the cached checkpoint).

A run that exits 0 has not yet shown that memory and MFU are read on this device, nor
that it trained on the data and weights it was asked for: :func:`check_training_run`
reads them back from ``metrics.jsonl`` and ``run.json``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ...files import read_json
from ...training.metrics_file import RECORD_LIMIT


@dataclass(frozen=True)
class TrainingCheck:
    """What a training rung's run folder must show for the rung to pass."""

    steps: int
    mfu: bool  # MFU is measured (trn2, CUDA); on a CPU it is left out of the records
    corpus: str | None = None  # run.json's resolved corpus, when the rung asked for one
    init: str | None = None  # run.json's init, when the rung asked for one


def check_training_run(run_dir: str | Path, expect: TrainingCheck) -> tuple[bool, str]:
    """(passed, one line): does ``run_dir`` show the checks the rung claims?

    A run that exits 0 has not yet shown that memory and MFU are read on this device
    (torchtitan writes 0 when its memory monitor reads another device's statistics), nor
    that it trained on the data and weights it was asked for; this reads them back.
    """
    from ...training.metrics_file import read_metrics

    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return False, f"no {path}"
    records = read_metrics(path)
    if len(records) != expect.steps:
        return False, f"{len(records)} of {expect.steps} steps recorded in {path}"
    for r in records:
        step = r.get("step")
        loss = r.get("loss")
        if not isinstance(loss, int | float) or not math.isfinite(loss):
            return False, f"step {step}: loss {loss!r} is not a finite number"
        memory = r.get("memory_gib")
        if not isinstance(memory, int | float) or not memory > 0:
            return False, f"step {step}: memory_gib {memory!r}, expected a reading above 0"
        if expect.mfu:
            mfu = r.get("mfu_pct")
            if not isinstance(mfu, int | float) or not mfu > 0:
                return False, f"step {step}: mfu_pct {mfu!r}, expected a reading above 0"
    manifest: dict = {}
    if expect.corpus or expect.init:
        try:
            manifest = read_json(run_dir / "run.json", limit=RECORD_LIMIT, fix="")
        except (OSError, ValueError):
            return False, f"no readable {run_dir / 'run.json'}"
    resolved = manifest.get("resolved", {})
    if expect.corpus and resolved.get("corpus") != expect.corpus:
        return False, (
            f"run.json says corpus {resolved.get('corpus')!r}, the rung asked for {expect.corpus!r}"
        )
    # `pretrained` is resolved to the folder of published weights before training, and
    # run.json records that folder as init_dir: the checkpoint every rank loaded
    if expect.init == "pretrained" and not manifest.get("init_dir"):
        return (
            False,
            "run.json names no checkpoint folder (init_dir), the rung asked for pretrained",
        )
    if expect.init not in (None, "pretrained") and resolved.get("init") != expect.init:
        return (
            False,
            f"run.json says init {resolved.get('init')!r}, the rung asked for {expect.init!r}",
        )
    last = records[-1]
    said = f"{len(records)} steps, loss {records[0]['loss']:.3f} -> {last['loss']:.3f}"
    said += f", memory {max(r['memory_gib'] for r in records):.2f} GiB"
    if expect.mfu:
        said += f", MFU {min(r['mfu_pct'] for r in records):.1f}%"
    return True, said


def training_memory(run_dir: Path) -> dict | None:
    """A training rung's memory per rank: measured peak per step (metrics.jsonl, the
    device's allocator) and the plan's estimate by category, or None if unreadable."""
    from ...training.metrics_file import read_metrics
    from ...training.plan import plan_run
    from ...training.spec import RunSpec

    try:
        info = read_json(run_dir / "run.json", limit=RECORD_LIMIT, fix="")
        records = read_metrics(run_dir / "metrics.jsonl")
        spec = RunSpec(**info["spec"])
        plan = plan_run(spec, device_type=info["resolved"]["device"])
    except Exception:  # a rung that failed early: its own line says why
        return None
    return {
        "measured_peak_gib_per_step": [r.get("memory_gib") for r in records],
        "estimated_gib": plan.memory().row(),
    }


def full_size_flags(
    online: bool, checkpoint_cached: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(extra train flags, notes) of ``4b_native_64ranks`` for what this machine reaches.

    The rung checks what ``reproduce`` needs: C4 streamed from the hub (the 4b preset's
    corpus) and the published Qwen3-4B checkpoint loaded on 64 ranks. Offline it falls
    back to the embedded corpus and random init and says which checks it did not make.
    """
    flags: list[str] = []
    notes: list[str] = []
    if not online:
        flags += ["--corpus", "embedded"]
        notes.append("C4 not checked (no network: HF_HUB_OFFLINE or the hub unreachable)")
    if online or checkpoint_cached:
        flags += ["--init", "pretrained"]
    else:
        flags += ["--init", "random"]
        notes.append("checkpoint load not checked (not in the hub cache and no network)")
    return tuple(flags), tuple(notes)


def _hub_online() -> bool:
    """Can this machine reach the Hugging Face hub? (False whenever HF_HUB_OFFLINE is set.)"""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return False
    import urllib.request

    try:
        urllib.request.urlopen("https://huggingface.co/api/status", timeout=10)  # noqa: S310
    except Exception:  # any failure: treat as offline, and the rung says so
        return False
    return True


def _checkpoint_cached(repo_id: str) -> bool:
    """Is the checkpoint's config in the local hub cache? (Never touches the network.)"""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False
