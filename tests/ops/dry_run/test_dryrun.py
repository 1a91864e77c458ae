"""The trn2 layouts at their real size, built on this CPU with torchtitan's fake backend.

Qwen3-4B's full 36-layer layout on 64 simulated ranks is dry-run (and checked against
the memory estimate) by notebook 04, which nbval executes; here the command line's JSON
on the 30B-A3B layout.
"""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from qwen3_trn_helpers.model.shapes import QWEN3_30B_A3B

pytestmark = pytest.mark.slow


@pytest.mark.long
def test_30b_a3b_layout_from_the_command_line():
    """The 30B-A3B layout (FSDP 64, full activation checkpointing), 1 of its 48 layers.

    torchtitan's grouped_mm experts: the same parameters as the blockwise ones, without
    the ~127 padded 256-token blocks per layer that take a CPU a minute a layer.
    """
    # no --variant: the MoE preset implies nki_moe (the only variant it fits)
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "dry-run", "--preset", "30b-a3b",
           "--moe-impl", "grouped_mm", "--layers", "1", "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert (report["variant"], report["preset"]) == ("nki_moe", "30b-a3b")
    assert (report["world_size"], report["tp"], report["fsdp"], report["layers"]) == (64, 1, 64, 1)
    assert report["params_total"] == replace(QWEN3_30B_A3B, n_layers=1).parameter_count()
    # fp32 params + grads + AdamW's two moments = 16 bytes per local parameter
    assert report["bytes_per_rank"] == pytest.approx(16 * report["params_per_rank"], rel=1e-3)
    assert report["params_per_rank"] == pytest.approx(report["params_total"] / 64, rel=1e-3)
    assert report["measured_state_gib"] == pytest.approx(report["estimated_state_gib"], rel=0.01)
    assert report["fits"] and report["hbm_gib"] == 24 and report["usable_gib"] == 21.6
    assert report["total_gib"] <= report["usable_gib"]  # fits: at most 90% of the core
    assert report["reduce_dtype"] == "bfloat16"  # the plan that fits (notebook 04)
    assert report["fsdp_table_params"] == 2  # untied: embedding and output layer
    assert report["estimate"]["Neuron runtime"] == pytest.approx(1.19, abs=0.01)
    assert report["fits"] and report["hbm_gib"] == 24


def test_a_one_rank_preset_is_also_set_beside_this_machines_memory(capsys):
    """tiny and 0.6b train on one laptop CPU rank too: the report says whether they fit
    here (0.6b itself takes about 2 minutes and 11 GB, so the tiny preset stands in).
    (The command runs in this process: a child would add only its 8-second start; the
    entry point itself is tested in tests/core/cli/test_cli.py.)"""
    from qwen3_trn_helpers.cli import main

    assert main(["dry-run", "--preset", "tiny", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["world_size"], report["tp"], report["fsdp"]) == (1, 1, 1)
    assert report["params_per_rank"] == report["params_total"]
    assert report["machine_gib"] > 1 and report["fits_machine"] is True
    assert report["measured_state_gib"] == pytest.approx(report["estimated_state_gib"], rel=0.01)


def test_a_dry_run_twice_in_one_process(monkeypatch):
    """A notebook cell run twice: the second sharded build of an equal fake world got
    the first build's mesh back from torch's DTensor caches, and FSDP refused it (CI:
    "Expected param's DTensor mesh to be the same mesh passed to fully_shard"). The
    second one now runs in a child and reports the same layout."""
    from qwen3_trn_helpers.ops import dry_run as module
    from qwen3_trn_helpers.runs import child
    from qwen3_trn_helpers.training.spec import RunSpec

    children, real_call = [], child.call
    built_before = module._SHARDED_BUILDS  # another test in this worker may have built one
    monkeypatch.setattr(child, "call", lambda *a, **k: children.append(a) or real_call(*a, **k))
    spec = RunSpec(preset="4b")
    first = module.dry_run(spec, layers=1)
    second = module.dry_run(spec, layers=1)
    assert len(children) == (2 if built_before else 1)  # the second one in a child
    layout = (first.plan.world_size, first.plan.tp)
    assert (second.plan.world_size, second.plan.tp) == layout == (64, 4)
    assert second.params_per_rank == first.params_per_rank
