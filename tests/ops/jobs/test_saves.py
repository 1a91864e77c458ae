"""A job's saves sized to it (ops/jobs/saves.py): Young/Daly's interval, keep-k from the
free space, async by default, one warning line with the numbers when saves would fill
the disk or take over 10% of the wall time."""

from __future__ import annotations

import json
import math

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.model.presets import PRESETS
from qwen3_trn_helpers.ops.jobs.saves import (
    FSX_SAMPLE_GIB,
    NODE_MTBF_H,
    Storage,
    size_saves,
    storage_for,
    young_daly_s,
)
from qwen3_trn_helpers.training.stopping import FSX_SAMPLE_WRITE_MB_S

FSX = Storage(FSX_SAMPLE_WRITE_MB_S, "sample", FSX_SAMPLE_GIB * 2**30, "sample")


def params(preset: str) -> int:
    return PRESETS[preset].shape.parameter_count()


def test_young_daly_is_daly_first_order():
    assert young_daly_s(100.0, 1e6) == pytest.approx(math.sqrt(2 * 100 * 1e6) - 100)
    assert young_daly_s(3e6, 1e6) == 1e6  # a save longer than two MTBFs: save every MTBF


def test_the_old_fixed_default_is_what_the_review_measured_and_is_warned_about():
    """4B, a synchronous save every 100 steps of ~2.1 s on the sample FSx: a 165 s save
    per ~210 s of steps, 44% of the wall time (the review's figure), in one line."""
    saves = size_saves(params("4b"), FSX, nodes=16, step=(2.1, "stated"), interval=100,
                       mode="disabled")  # fmt: skip
    assert saves.write_s == pytest.approx(165, abs=1)
    assert saves.overhead == pytest.approx(165 / (210 + 165), abs=0.01)
    [line] = saves.warnings()
    assert line.startswith("warning: saves would take 44% of the wall time: a 165 s sync save")
    assert "48.3 GB at 293 MB/s" in line and "--checkpoint-interval 707 or more" in line
    assert "\n" not in line


@pytest.mark.parametrize("preset", ["4b", "30b-a3b"])
def test_sized_saves_lose_least_and_fit_the_clock(preset):
    """Sized: Young/Daly's interval for the job's MTBF (nodes share it), never below the
    write; async; the sync share of each cycle then well under 10%."""
    step = (2.0, "stated")
    saves = size_saves(params(preset), FSX, nodes=16, step=step)
    mtbf = NODE_MTBF_H * 3600 / 16
    assert saves.mode == "async" and saves.interval_s >= saves.write_s
    assert saves.interval == math.ceil(young_daly_s(saves.write_s, mtbf) / 2.0)
    assert saves.overhead == 0 and saves.sync_overhead < 0.05
    more_nodes = size_saves(params(preset), FSX, nodes=64, step=step)
    assert more_nodes.interval < saves.interval  # more nodes fail more often: save sooner


def test_keep_k_comes_from_the_free_space():
    """4B's 48 GB: ten fit the sample FSx; 30B-A3B's 366 GB: only two and one being
    written, which already overfill 80% of it: warned, with the numbers."""
    small = size_saves(params("4b"), FSX, nodes=16, step=(2.0, "stated"))
    assert small.keep == 10 and not small.warnings()
    big = size_saves(params("30b-a3b"), FSX, nodes=16, step=(2.0, "stated"))
    assert big.keep == 2 and big.disk_bytes == pytest.approx(3 * big.checkpoint_bytes)
    [line] = big.warnings()
    assert line.startswith("warning: saves would fill the disk: 2 kept + 1 being written x 366")
    roomy = Storage(FSX.write_mb_s, "", 10e12, "stated")
    assert size_saves(params("30b-a3b"), roomy, nodes=16, step=None).keep == 10


def test_measured_rates_win_over_the_sample(tmp_path):
    """A run folder's own saves and steps: what the next job for it is sized from."""
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    lines = [{"step": s, "bytes": 2_000_000_000, "seconds": 4.0, "mode": "async"}
             for s in (1, 2, 3)]  # fmt: skip
    (out / "checkpoint" / "saves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    storage = storage_for(str(out))
    assert storage.write_mb_s == pytest.approx(500) and storage.write_source.startswith("measured")
    assert storage.free_source.startswith("measured here")
    stated = storage_for(str(out), write_mb_s=100, free_gb=50)
    assert (stated.write_mb_s, stated.free_bytes) == (100, 50e9)
    pods = storage_for("/fsx/nowhere/run", visible=False)  # a pod's path: not measurable here
    assert pods.free_bytes == FSX_SAMPLE_GIB * 2**30 and "sample" in pods.free_source


def test_job_file_carries_sized_saves_and_one_line_warnings(tmp_path, capsys, monkeypatch):
    """``qwen3-trn slurm`` for 4B on two trn2 nodes: what it left unsaid is sized (async,
    Young/Daly's interval at the planner's step estimate, keep-k) and written into the
    script; what was said stays; a small disk and a short sync interval: two warnings."""
    monkeypatch.setenv("QWEN3_TRN_CALIBRATION", str(tmp_path / "calibration.json"))
    base = ["slurm", "--preset", "4b", "--nnodes", "2", "--device", "neuron", "--steps",
            "1000", "--corpus", "embedded", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main([*base, "--storage-free-gb", "2000"]) == 0
    out, err = capsys.readouterr()
    assert "warning: saves" not in err
    train = next(line for line in out.splitlines() if "qwen3_trn_helpers train" in line)
    assert "--checkpoint-async async" in train and "--keep-checkpoints" not in train  # (10)
    interval = int(train.split("--checkpoint-interval ")[1].split()[0])
    assert interval > 1000  # hours of steps between saves at two nodes' MTBF
    assert "# saves: every" in out and "Young/Daly" in out
    asked = [*base, "--storage-free-gb", "100", "--checkpoint-interval", "100",
             "--checkpoint-async", "disabled"]  # fmt: skip
    assert main(asked) == 0
    out, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if line.startswith("warning: saves")]
    assert len(warnings) == 2, err
    assert any("fill the disk" in w for w in warnings)
    assert any("of the wall time" in w for w in warnings)
    train = next(line for line in out.splitlines() if "qwen3_trn_helpers train" in line)
    assert "--checkpoint-interval 100" in train and "--checkpoint-async" not in train
    assert "--keep-checkpoints 2" in train  # what 80 of 100 GB holds, one more written
