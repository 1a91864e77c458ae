"""Nothing is lost: NaN stops cleanly, Ctrl-C keeps every finished step, resume is exact."""

import json
import signal
import subprocess
import sys
import time

import pytest

from qwen3_trn_helpers.errors import ConfigError, RunFolderError, TrainingError
from qwen3_trn_helpers.metrics import read_metrics
from qwen3_trn_helpers.train import run


def test_nan_loss_stops_at_that_step_and_keeps_earlier_ones(tmp_path):
    with pytest.raises(TrainingError, match=r"loss became nan at step (\d+)") as info:
        run(steps=8, lr=1e8, out=tmp_path / "nan", progress=False)
    step = info.value.step
    records = read_metrics(tmp_path / "nan" / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, step))
    manifest = json.loads((tmp_path / "nan" / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["steps_completed"] == step - 1


def test_ctrl_c_leaves_valid_metrics_for_every_completed_step(tmp_path):
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qwen3_trn_helpers",
            "train",
            "--steps",
            "60",
            "--out",
            str(out),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a job started in the background by a non-interactive shell (as CI may be)
        # inherits SIGINT ignored; give the child the default a terminal user has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("interrupted:")
    lines = metrics.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is complete JSON
    assert len(records) >= 2 and [r["step"] for r in records] == list(range(1, len(lines) + 1))
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["steps_completed"] == len(records)


def test_resume_reproduces_the_uninterrupted_curve(tmp_path):
    whole = run(steps=6, checkpoint_interval=3, out=tmp_path / "whole", progress=False)

    def stop_at_5(record):
        if record["step"] == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(steps=6, checkpoint_interval=3, out=tmp_path / "cut", progress=False, on_step=stop_at_5)
    assert [r["step"] for r in read_metrics(tmp_path / "cut" / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    resumed = run(steps=6, checkpoint_interval=3, out=tmp_path / "cut", resume=True, progress=False)
    assert [m["step"] for m in resumed.metrics] == [1, 2, 3, 4, 5, 6]  # 4, 5 not doubled
    assert resumed.losses == pytest.approx(whole.losses, abs=1e-6)
    manifest = json.loads((tmp_path / "cut" / "run.json").read_text())
    assert manifest["resumed_from_step"] == 3


def test_resume_needs_a_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="resume needs checkpoints"):
        run(steps=2, out=tmp_path, resume=True, progress=False)
    with pytest.raises(RunFolderError, match="nothing to resume"):
        run(steps=2, out=tmp_path, resume=True, checkpoint_interval=1, progress=False)
