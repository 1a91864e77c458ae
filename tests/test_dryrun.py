"""The trn2 layouts at their real size, built on this CPU with torchtitan's fake backend."""

import json
import subprocess
import sys

import pytest

from qwen3_trn_helpers.training.dryrun import dry_run
from qwen3_trn_helpers.training.spec import RunSpec

pytestmark = pytest.mark.slow


def test_4b_on_64_ranks_measured_against_the_estimate():
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", "dry-run", "--preset", "4b", "--json"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert (report["world_size"], report["tp"], report["fsdp"]) == (64, 4, 16)
    assert report["params_total"] == 4_022_468_096  # Qwen3-4B-Instruct-2507, tied once
    # rank 0's shards: 1/64 of every weight, plus the norms TP keeps whole on each rank
    assert 4_022_468_096 / 64 < report["params_per_rank"] < 4_022_468_096 / 64 * 1.001
    # fp32 params + grads + AdamW's two moments = 16 bytes per local parameter
    assert report["bytes_per_rank"] == pytest.approx(16 * report["params_per_rank"], rel=1e-3)
    estimated = sum(report["estimate"][k] for k in ("params", "grads", "AdamW"))
    assert report["measured_state_gib"] == pytest.approx(estimated, rel=0.01)
    assert report["fits"] and report["total_gib"] < report["hbm_gib"] == 24
    assert report["activations_gib"] > 0.5  # estimated at seq 4096, selective AC
    placements = {s["parameter"]: s for s in report["shards"]}
    assert any("Shard" in s["placements"] for s in placements.values())


def test_30b_a3b_layout_with_two_layers():
    """The 30B-A3B layout (FSDP 64, full activation checkpointing), 2 of its 48 layers."""
    # torchtitan's grouped_mm experts: the same parameters as the blockwise ones, without
    # their ~127 padded 256-token blocks per layer, which take a CPU a minute a layer
    report = dry_run(RunSpec(variant="nki_moe", moe_impl="grouped_mm"), layers=2)
    assert (report.world_size, report.tp, report.fsdp, report.layers) == (64, 1, 64, 2)
    from dataclasses import replace

    from qwen3_trn_helpers.model.shapes import QWEN3_30B_A3B

    assert report.params_total == replace(QWEN3_30B_A3B, n_layers=2).parameter_count()
    assert report.bytes_per_rank == pytest.approx(16 * report.params_per_rank, rel=1e-3)
