"""Runs that survive (issue 25): --resume auto, a checkpoint saved on SIGTERM, and the
checks of the run parameters that make it so."""

from __future__ import annotations

import json
import os
import signal

import pytest

from qwen3_trn_helpers import run
from qwen3_trn_helpers.errors import ConfigError, Terminated
from qwen3_trn_helpers.runs.folder import latest_checkpoint_step
from qwen3_trn_helpers.runs.launch import torchrun_command
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec


def test_resume_auto_and_max_restarts_are_checked():
    RunSpec(resume="auto", checkpoint_interval=5, out="x", max_restarts=2).validate()
    with pytest.raises(ConfigError, match="resume must be True, False or 'auto'"):
        RunSpec(resume="yes", checkpoint_interval=5, out="x").validate()
    with pytest.raises(ConfigError, match='max_restarts 2 restarts failed ranks.*resume="auto"'):
        RunSpec(max_restarts=2, checkpoint_interval=5, out="x", resume=True).validate()
    with pytest.raises(ConfigError, match="resume needs checkpoints"):
        RunSpec(resume="auto", out="x").validate()
    spec = RunSpec(resume="auto", checkpoint_interval=5, out="/r", max_restarts=2, nproc=2)
    assert RunSpec(**json.loads(json.dumps(spec.__dict__))) == spec  # run.json round trip
    cmd = torchrun_command(plan_run(spec, device_type="cpu"))
    assert "--max-restarts=2" in cmd  # torchrun's, before its script
    ranks = cmd[cmd.index("qwen3_trn_helpers") :]
    assert "--max-restarts" not in ranks
    assert ranks[ranks.index("--resume") + 1] == "auto"  # restarted ranks resume by themselves


@pytest.mark.slow
@pytest.mark.long
def test_sigterm_saves_the_step_and_resume_auto_goes_on(tmp_path, ten_step_random):
    """SIGTERM at step 3 of a run saving every 100 steps: step 3's checkpoint is saved
    and the run ends terminated; the same call again resumes there and ends with the
    losses of an uninterrupted run; a third call has nothing left to train."""
    out = str(tmp_path / "run")
    same = dict(steps=10, checkpoint_interval=100, resume="auto", out=out, progress=False)

    def sigterm_at_step_3(record):
        if record["step"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Terminated, match="checkpoint of step 3 saved; --resume auto"):
        run("native", on_step=sigterm_at_step_3, **same)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "terminated" and info["steps_completed"] == 3
    assert latest_checkpoint_step(out) == 3  # saved on the signal, not at the interval
    resumed = run("native", **same)
    assert [m["step"] for m in resumed.metrics] == list(range(1, 11))  # each once
    assert resumed.losses == pytest.approx(ten_step_random.losses, abs=1e-6)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["resumed_from_step"] == 3
    again = run("native", **same)  # a requeue after the end: nothing to train
    assert again.losses == resumed.losses and again.status == "completed"
