"""Run folders that never mix or lose steps: an unreadable run.json never turns the
resume check off (the checkpoint's own settings are read instead), and metrics.jsonl
keeps every valid record whatever lies between them. Each ends in one line naming the
file, the setting or the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hostile import one_error_line

from qwen3_trn_helpers import run
from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.training.checkpoint import SETTINGS_FILE
from qwen3_trn_helpers.training.metrics_file import (
    keep_steps_before,
    read_metrics,
    scan_metrics,
)


def steps_in(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A 2-step run at the tiny preset's 256 tokens, checkpoint at step 2 (copied by
    each test that damages it)."""
    out = tmp_path_factory.mktemp("run-folder") / "run"
    run(steps=2, checkpoint_interval=2, out=str(out), progress=False)
    return out


def resume_argv(out: Path, *extra: str, steps: int = 3) -> list[str]:
    return ["train", "--steps", str(steps), "--checkpoint-interval", "2", "--out", str(out),
            "--resume", "--no-progress", *extra]  # fmt: skip


# --- a resume is the same training, or a change asked for (issue 51, items 3 and 4) -------


def _copy(checkpointed: Path, tmp_path: Path) -> Path:
    shutil.copytree(checkpointed, tmp_path / "run")
    return tmp_path / "run"


def test_a_resume_with_another_global_batch_is_refused_naming_it(tmp_path, checkpointed, capsys):
    """It had gone through silently, and run.json then claimed the new batch for the
    whole run."""
    out = _copy(checkpointed, tmp_path)
    assert main(resume_argv(out, "--global-batch-size", "2")) == 1
    line = one_error_line(capsys)
    assert "with other settings than the checkpoint of step 2 was trained with" in line
    assert "global batch 1 -> 2 sequences per step" in line and "--allow-change" in line
    assert steps_in(out) == [1, 2]


def test_allow_change_goes_on_and_run_json_records_the_change(tmp_path, checkpointed, capsys):
    out = _copy(checkpointed, tmp_path)
    assert main(resume_argv(out, "--global-batch-size", "2", "--allow-change")) == 0
    change = "global batch 1 -> 2 sequences per step"
    assert f"note: --allow-change: from step 3, {change}" in capsys.readouterr().err
    resumes = json.loads((out / "run.json").read_text())["resumes"]
    assert resumes == [{"from_step": 2, "changes": [change], "allowed_by": "--allow-change"}]
    assert steps_in(out) == [1, 2, 3]


def test_an_emptied_run_json_leaves_the_check_on(tmp_path, checkpointed, capsys):
    """run.json ``{"spec":{},"resolved":{}}`` had turned the check off (each missing key
    skipped), and the resumed run.json claimed the new lr and seed."""
    out = _copy(checkpointed, tmp_path)
    (out / "run.json").write_text('{"spec":{},"resolved":{}}')
    assert main(resume_argv(out, "--lr", "1e-3")) == 1
    line = one_error_line(capsys)
    assert "with other settings" in line and " -> 0.001" in line and "lr " in line
    assert steps_in(out) == [1, 2]


def test_the_next_command_names_a_killed_runs_record(tmp_path, checkpointed, capsys):
    """kill -9 runs nothing of ours: run.json stays `running`, and the next command into
    the folder (which it can hold, so no one else does) says what happened."""
    out = _copy(checkpointed, tmp_path)
    record = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**record, "status": "running"}))
    assert main(resume_argv(out)) == 0
    err = capsys.readouterr().err
    assert f"{out / 'run.json'} says `running`, but no process holds {out}" in err
    assert "metrics.jsonl holds steps 1-2" in err


def test_more_steps_that_move_the_lr_get_a_note(tmp_path, capsys):
    """torchtitan recomputes its schedule over the new --steps: a finished 6-step run
    resumed for 8 trains step 7 at a higher lr than its decay had reached, without a word
    before."""
    out = tmp_path / "run"
    run(steps=6, checkpoint_interval=6, out=str(out), progress=False)
    capsys.readouterr()
    assert (
        main(resume_argv(out, steps=8)[:-1] + ["--checkpoint-interval", "6", "--no-progress"]) == 0
    )
    err = capsys.readouterr().err
    assert "--steps 8 (the checkpointed run's schedule had 6) moves the lr schedule: step 7" in err
    assert "(higher)" in err or "(the peak again)" in err


# --- an unreadable run.json never turns the resume check off ---------------------------

#: what the probe did to run.json: each one had resumed a 256-token run at 64 silently
DAMAGES = {
    "garbage": lambda p: p.write_text("garbage\n"),
    "missing": lambda p: p.unlink(),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:40]),
    "binary": lambda p: p.write_bytes(bytes(range(256))),
    "a JSON list": lambda p: p.write_text("[]"),
}


def test_each_checkpoint_records_the_settings_it_was_trained_with(checkpointed):
    record = json.loads((checkpointed / "checkpoint" / "step-2" / SETTINGS_FILE).read_text())
    saved = json.loads((checkpointed / "run.json").read_text())
    assert record["resolved"]["seq len"] == saved["resolved"]["seq len"] == 256
    for key in ("init", "seed", "warmup_steps", "mixed_precision"):
        assert record["spec"][key] == saved["spec"][key], key


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_run_json_is_checked_against_the_checkpoint(
    damage, tmp_path, checkpointed, capsys
):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    DAMAGES[damage](out / "run.json")
    before = (out / "run.json").read_bytes() if (out / "run.json").exists() else None
    assert main(resume_argv(out, "--seq-len", "64")) == 1
    line = one_error_line(capsys)
    assert (
        "seq len 256 -> 64 (" in line
        and "; the settings saved with the checkpoint at step 2)" in line
    )
    after = (out / "run.json").read_bytes() if (out / "run.json").exists() else None
    assert after == before and steps_in(out) == [1, 2]  # refused before anything changed


def test_a_checkpoint_without_settings_and_no_run_json_is_refused(tmp_path, checkpointed, capsys):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "checkpoint" / "step-2" / SETTINGS_FILE).unlink()  # an older qwen3-trn's checkpoint
    (out / "run.json").write_text("garbage")
    for auto in ([], ["--resume", "auto"]):
        assert main([*resume_argv(out), *auto]) == 1
        line = one_error_line(capsys)
        assert "run.json is not valid JSON (Expecting value at line 1 column 1): cut short" in line
        assert f"records no settings ({SETTINGS_FILE})" in line
        assert "Put the run's run.json back, or start a new run (--overwrite" in line
    (out / "run.json").unlink()
    assert main(resume_argv(out)) == 1
    assert "run.json is missing" in (line := one_error_line(capsys)) and "a new --out" in line
    assert steps_in(out) == [1, 2] and not (out / "run.json").exists()


def test_a_resume_with_the_same_settings_goes_on_and_writes_run_json_anew(
    tmp_path, checkpointed, capsys
):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "run.json").unlink()
    assert main(resume_argv(out)) == 0
    note = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert note == [
        f"note: {out / 'run.json'} is missing; the settings saved with the checkpoint at step 2 "
        "match this resume's; run.json is written anew"
    ]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["resolved"]["seq len"] == 256
    assert info["resumed_from_step"] == 2 and steps_in(out) == [1, 2, 3]


def test_resume_auto_after_the_last_step_with_a_damaged_run_json_is_one_line(
    tmp_path, checkpointed, capsys
):
    """(It read run.json as the finished run's record: `unexpected JSONDecodeError`.)"""
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "run.json").write_text("{")
    assert main([*resume_argv(out, steps=2), "--resume", "auto"]) == 1
    err = capsys.readouterr().err
    assert "pass --steps above it" in err and "unexpected" not in err


# --- metrics.jsonl keeps every valid record ------------------------------------------------


def _line(step: int) -> bytes:
    return json.dumps({"step": step, "loss": 10.0 - step}).encode() + b"\n"


def test_every_valid_record_is_read_whatever_lies_between(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(
        _line(1) + b"garbage{{{\n" + _line(2) + b"\xff\xfe not utf-8\n" + _line(3)
        + b"[]\n" + b'{"step": "4"}\n' + _line(5) + b'{"step": 6, "lo'
    )  # fmt: skip
    records, unreadable = scan_metrics(path)
    assert [r["step"] for r in records] == [1, 2, 3, 5]
    assert unreadable == [2, 4, 6, 7, 9]
    keep_steps_before(path, 4)  # a resume from step 3: the valid lines before it, cleanly
    assert scan_metrics(path) == ([{"step": s, "loss": 10.0 - s} for s in (1, 2, 3)], [])


@pytest.mark.parametrize(
    "bad",
    [b"garbage{{{\n", b"\xff\xfe\xfd\n", b'{"step": 2, "lo\n'],
    ids=["garbage", "not UTF-8", "cut short"],
)
def test_a_bad_line_loses_no_step_on_resume_and_is_named(bad, tmp_path, checkpointed, capsys):
    """`garbage{{{` between steps 1 and 2 had left 1, 3 after a resume (step 2 deleted);
    a non-UTF-8 line ended `unexpected UnicodeDecodeError`."""
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    lines = (out / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    (out / "metrics.jsonl").write_bytes(lines[0] + bad + lines[1])
    assert main(resume_argv(out)) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1, notes
    assert "holds 1 unreadable line (line 2: not a JSON step record), dropped now" in notes[0]
    assert "has no line" not in notes[0]
    assert steps_in(out) == [1, 2, 3]
    assert scan_metrics(out / "metrics.jsonl")[1] == []  # the file is clean again


def test_a_file_cut_short_then_resumed_later_names_the_missing_steps(
    tmp_path, checkpointed, capsys
):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "metrics.jsonl").write_bytes(b'{"step": 1, "lo')  # cut inside its first line
    assert main(resume_argv(out)) == 0
    note = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert len(note) == 1 and "has no line for steps 1-2, though the checkpoint" in note[0]
    assert "and holds 1 unreadable line (line 1" in note[0]
    assert steps_in(out) == [3]
