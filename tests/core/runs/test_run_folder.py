"""Settling a run folder: one look at its newest checkpoint decides how a run starts.

No training here: the folders are laid out by hand (a ``step-N`` folder with DCP's
``.metadata`` is what torchtitan's loader counts as a checkpoint), so each decision is
checked in milliseconds. The runs that train through these decisions are in
test_reliability.py, test_survive.py, test_hostile.py and test_multinode.py.
"""

import json
from pathlib import Path

import pytest

from qwen3_trn_helpers.errors import RunFolderError
from qwen3_trn_helpers.runs.folder import Settled, settle_run_folder
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec


def _plan(out: Path, **fields):
    spec = RunSpec(preset="tiny", steps=4, checkpoint_interval=2, out=str(out), **fields)
    return plan_run(spec, device_type="cpu")  # (nothing of the machine is asked)


def _earlier_run(out: Path, *, checkpoint_step: int | None = None) -> None:
    """What a run of ours leaves: run.json, metrics and (optionally) a checkpoint."""
    out.mkdir(parents=True)
    # (the shape run.json has: the settings as given and as resolved)
    (out / "run.json").write_text(json.dumps({"status": "completed", "spec": {}, "resolved": {}}))
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    if checkpoint_step is not None:
        step_dir = out / "checkpoint" / f"step-{checkpoint_step}"
        step_dir.mkdir(parents=True)
        (step_dir / ".metadata").write_bytes(b"")


def test_resume_auto_over_a_run_with_every_step_is_finished_and_untouched(tmp_path):
    out = tmp_path / "run"
    _earlier_run(out, checkpoint_step=4)
    plan = _plan(out, resume="auto")
    for share in ((0, 1), None):  # a rank and a one-node launcher alike
        settled = settle_run_folder(out, plan, writer=True, share=share)
        assert settled == Settled(resumed_from=4, finished=True)
    assert (out / "run.json").is_file() and (out / "metrics.jsonl").is_file()


def test_resume_auto_without_a_checkpoint_starts_fresh_and_clears_the_first_attempt(tmp_path):
    out = tmp_path / "run"
    _earlier_run(out)  # an attempt killed before its first checkpoint
    settled = settle_run_folder(out, _plan(out, resume="auto"), writer=True, share=(0, 1))
    assert settled == Settled()
    assert not (out / "run.json").exists() and not (out / "metrics.jsonl").exists()


def test_a_rank_that_does_not_write_leaves_a_fresh_folder_alone(tmp_path):
    out = tmp_path / "run"
    _earlier_run(out)
    settled = settle_run_folder(out, _plan(out, resume="auto"), writer=False, share=(1, 2))
    assert settled == Settled() and (out / "run.json").is_file()


def test_resume_without_a_checkpoint_is_refused_naming_the_fix(tmp_path):
    out = tmp_path / "run"
    _earlier_run(out)
    with pytest.raises(RunFolderError, match="nothing to resume in .*checkpoint_interval"):
        settle_run_folder(out, _plan(out, resume=True), writer=True, share=(0, 1))
    assert (out / "run.json").is_file()  # refused before anything changed


def test_one_node_of_several_leaves_the_deciding_to_the_jobs_rank_0(tmp_path):
    fresh = tmp_path / "fresh"
    _earlier_run(fresh)
    settled = settle_run_folder(
        fresh, _plan(fresh, resume="auto"), writer=True, share=None, decides=False
    )
    assert settled == Settled() and (fresh / "run.json").is_file()  # not cleared here
    new = tmp_path / "new"
    assert settle_run_folder(new, _plan(new), writer=True, share=None, decides=False) == Settled()
    assert new.is_dir()  # made, for the node's own launch log
    done = tmp_path / "done"
    _earlier_run(done, checkpoint_step=4)
    # not "finished" here: only rank 0 reads run.json and says so, for the whole job
    settled = settle_run_folder(
        done, _plan(done, resume="auto"), writer=True, share=None, decides=False
    )
    assert settled == Settled(resumed_from=4)
