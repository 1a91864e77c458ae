"""Checkpoints at real size: a save inside the time-limit warning, checkpoints that
recover, and saves that never read back what they wrote.

The runs here are the tiny preset on one CPU rank (seconds); the real two-node Slurm
job warned of its time limit is in test_multinode.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.model.presets import PRESETS
from qwen3_trn_helpers.ops.jobs.slurm import slurm_script
from qwen3_trn_helpers.training.metrics_file import read_metrics
from qwen3_trn_helpers.training.spec import RunSpec
from qwen3_trn_helpers.training.stopping import (
    FSX_SAMPLE_WRITE_MB_S,
    MIN_SIGNAL_LEAD_S,
    SAVE_SAFETY,
    STOP_FILE,
    STOP_MARGIN_S,
    checkpoint_bytes,
    collective_timeout_s,
    save_seconds,
    signal_lead_s,
)


def steps_of(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl")]


def train(*args: str) -> int:
    return main(["train", "--no-progress", *args])


# --- how early a job must be warned ---------------------------------------------------


def test_the_warning_grows_with_the_checkpoint():
    params_4b = PRESETS["4b"].shape.parameter_count()
    params_30b = PRESETS["30b-a3b"].shape.parameter_count()
    # AdamW's state with fp32 weights: ~48 GB and ~370 GB, the figures the review gave
    assert checkpoint_bytes(params_4b) / 1e9 == pytest.approx(48, rel=0.05)
    assert checkpoint_bytes(params_30b) / 1e9 == pytest.approx(370, rel=0.05)
    assert FSX_SAMPLE_WRITE_MB_S == pytest.approx(1200 / 1024 * 250)  # 1.2 TiB at 250/TiB
    leads = []
    for nbytes in (10**6, checkpoint_bytes(params_4b), checkpoint_bytes(params_30b)):
        lead = signal_lead_s(nbytes)
        needed = save_seconds(nbytes) * SAVE_SAFETY + STOP_MARGIN_S
        assert lead >= max(needed, MIN_SIGNAL_LEAD_S) and lead % 60 == 0
        assert lead < max(needed, MIN_SIGNAL_LEAD_S) + 60
        # the collectives wait out the save (torchtitan lowers them to 100 s)
        assert collective_timeout_s(nbytes) >= max(2 * save_seconds(nbytes), 100)
        leads.append(lead)
    assert leads[0] == MIN_SIGNAL_LEAD_S < leads[1] < leads[2]
    # a file system four times as fast needs a shorter warning for 30B-A3B
    nbytes = checkpoint_bytes(params_30b)
    assert signal_lead_s(nbytes, 4 * FSX_SAMPLE_WRITE_MB_S) < leads[2]


def test_the_printed_script_takes_its_lead_time_from_the_model(tmp_path):
    leads = {}
    for preset in ("4b", "30b-a3b"):
        spec = RunSpec(preset=preset, nproc=64, nnodes=2, out="runs/q", device="neuron", steps=9)
        text = slurm_script(spec, on_trn2=True, python="/fsx/venv/bin/python", workdir="/fsx")
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)
        want = signal_lead_s(checkpoint_bytes(PRESETS[preset].shape.parameter_count()))
        assert f"#SBATCH --signal=B:USR1@{want}  " in text
        assert f'stop_file="$out"/{STOP_FILE}' in text and "trap on_time_limit USR1" in text
        leads[preset] = want
    assert MIN_SIGNAL_LEAD_S < leads["4b"] < leads["30b-a3b"]


def _stubbed_job(
    tmp_path: Path, spec: RunSpec, train_s: int = 4
) -> tuple[subprocess.Popen, Path, Path]:
    """The printed script under bash with Slurm's commands stubbed: scontrol records its
    arguments, srun runs the check and fabric steps at once and the training step
    (the one ending in `&`) as a ``train_s``-second sleep that marks its start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    stubs = {
        "scontrol": 'echo "scontrol $*" >> "$CALLS"; [ "$1 $2" = "show hostnames" ] && '
        "echo node1; true",
        "getent": "exit 2",
        "srun": f'case "$*" in *" train "*) touch "$CALLS.train"; sleep {int(train_s)}; '
        'echo "srun done" >> "$CALLS";; esac; true',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls),
           "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-2]"}  # fmt: skip
    text = slurm_script(spec, on_trn2=False, python="/bin/true", workdir=str(tmp_path))
    (tmp_path / "job.sbatch").write_text(text)
    job = subprocess.Popen(["bash", "job.sbatch"], cwd=tmp_path, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    return job, calls, tmp_path / "run" / STOP_FILE


def test_the_time_limit_warning_asks_for_a_save_then_requeues(tmp_path):
    """USR1 (Slurm's --signal=B:USR1@LEAD) no longer requeues at once (the ranks then had
    KillWait's 30 s to save): it creates the run's stop file, and requeues only once
    the training step has returned."""
    spec = RunSpec(nnodes=2, out="run", device="cpu", steps=5, checkpoint_interval=100)
    job, calls, stop_file = _stubbed_job(tmp_path, spec)
    deadline = time.monotonic() + 60
    while not Path(f"{calls}.train").exists():
        assert job.poll() is None and time.monotonic() < deadline, job.stdout.read()
        time.sleep(0.05)
    job.send_signal(signal.SIGUSR1)
    output, _ = job.communicate(timeout=60)
    assert job.returncode == 0, output
    assert stop_file.exists(), output  # every rank is asked to save and stop
    lines = calls.read_text().splitlines()
    # requeued after the ranks left, not while they were saving
    assert lines.index("srun done") < lines.index("scontrol requeue 42"), lines
    assert "time limit near" in output


def test_without_the_warning_the_job_is_not_requeued(tmp_path):
    spec = RunSpec(nnodes=2, out="run", device="cpu", steps=5, checkpoint_interval=100)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / STOP_FILE).touch()  # left by an attempt that never acted on it
    job, calls, stop_file = _stubbed_job(tmp_path, spec, train_s=0)  # no signal to wait for
    output, _ = job.communicate(timeout=60)
    assert job.returncode == 0, output
    assert "scontrol requeue 42" not in calls.read_text()
    assert not stop_file.exists()  # an old request does not stop the new attempt


# --- a run asked to save and stop ---------------------------------------------------------


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory) -> Path:
    """A 4-step run with checkpoints at steps 2 and 4 (copied by each test)."""
    out = tmp_path_factory.mktemp("ckpts") / "run"
    assert train("--steps", "4", "--checkpoint-interval", "2", "--out", str(out)) == 0
    return out


def test_a_run_asked_to_save_and_stop_saves_its_step_and_ends_cleanly(
    tmp_path, two_checkpoints, capsys
):
    out = tmp_path / "run"
    shutil.copytree(two_checkpoints, out)
    (out / STOP_FILE).touch()  # what the job script's trap does
    args = ("--steps", "8", "--checkpoint-interval", "100", "--out", str(out), "--resume")
    assert train(*args) == 0  # a clean exit: torchrun restarts nothing
    said = capsys.readouterr().out
    assert "stopped: asked to save and stop; checkpoint of step 5 saved" in said
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "stopped" and info["steps_completed"] == 5
    assert (out / "checkpoint" / "step-5" / ".metadata").is_file()  # inside no interval
    assert not (out / STOP_FILE).exists()  # done: the next run trains on
    assert train(*args) == 0
    assert steps_of(out) == list(range(1, 9))
    assert json.loads((out / "run.json").read_text())["resumed_from_step"] == 5


# --- checkpoints that recover ---------------------------------------------------------


def _damage(step_dir: Path, how: str) -> None:
    shard = sorted(step_dir.glob("*.distcp"))[0]
    if how == "missing shard":
        shard.unlink()
    elif how == "truncated shard":
        shard.write_bytes(shard.read_bytes()[:100])
    elif how == "unreadable metadata":
        (step_dir / ".metadata").write_bytes(b"not a pickle")


@pytest.mark.parametrize("how", ["missing shard", "truncated shard", "unreadable metadata"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(
    tmp_path, two_checkpoints, capsys, how
):
    """A requeued job whose newest checkpoint is damaged had failed every attempt: it
    resumes from the newest complete one, says so in one line, and sets the damaged
    one aside (torchtitan would load it, and --keep-checkpoints count it)."""
    out = tmp_path / "run"
    shutil.copytree(two_checkpoints, out)
    _damage(out / "checkpoint" / "step-4", how)
    args = ("--steps", "5", "--checkpoint-interval", "2", "--out", str(out), "--resume", "auto")
    assert train(*args) == 0
    err = capsys.readouterr().err
    notes = [ln for ln in err.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1, err
    assert "step-4" in notes[0] and "resuming from step-2" in notes[0], notes
    assert steps_of(out) == [1, 2, 3, 4, 5]  # steps 3 and 4 trained again, once each
    assert json.loads((out / "run.json").read_text())["resumed_from_step"] == 2
    assert (out / "checkpoint" / "damaged-4").is_dir()
    assert (out / "checkpoint" / "step-4" / ".metadata").is_file()  # written afresh


def test_only_a_damaged_checkpoint_is_still_one_error_line(tmp_path, two_checkpoints, capsys):
    out = tmp_path / "run"
    shutil.copytree(two_checkpoints, out)
    for step in (2, 4):
        _damage(out / "checkpoint" / f"step-{step}", "missing shard")
    args = ("--steps", "5", "--checkpoint-interval", "2", "--out", str(out), "--resume")
    assert train(*args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: checkpoint") and "step-4" in err[0]
    assert "is missing" in err[0]


def test_keep_checkpoints_keeps_the_newest_and_hashes_shards_as_written(tmp_path, monkeypatch):
    """torchtitan 0.3.0 skips its purge after the last step's save (it kept step-3,
    step-4 and step-5 here); our checkpointer purges there too, and the run returns
    after torchtitan's purge thread is joined (its close), so nothing is left to wait.

    The same five saves hash their shards: every save had read each shard back for its
    sha256 (48 GB again from FSx for 4B); the hash is now taken from the bytes as they
    are written, and is the file's."""
    from qwen3_trn_helpers import checksums
    from qwen3_trn_helpers.training.checkpoint import last_save_skips_purge

    assert last_save_skips_purge()  # the gate holds on the pinned torchtitan
    reads = []
    real = checksums.sha256_of  # the one file hash every module imports when it hashes
    monkeypatch.setattr(checksums, "sha256_of", lambda p: reads.append(p) or real(p))
    out = tmp_path / "run"
    args = ("--steps", "5", "--checkpoint-interval", "1", "--keep-checkpoints", "2")
    assert train(*args, "--out", str(out)) == 0
    assert reads == []  # nothing read back
    kept = sorted(p.name for p in (out / "checkpoint").glob("step-*"))
    assert kept == ["step-4", "step-5"]
    # rank 0 logged every save, its bytes and seconds to storage (save_log.py): what the
    # next job file for this folder sizes its saves from
    logged = [json.loads(x) for x in (out / "checkpoint" / "saves.jsonl").read_text().splitlines()]
    assert [e["step"] for e in logged] == [1, 2, 3, 4, 5] and all(e["seconds"] > 0 for e in logged)
    assert logged[0]["bytes"] > 0 and {e["mode"] for e in logged} == {"disabled"}
    shards = sorted((out / "checkpoint").glob("step-*/*.distcp"))
    assert len(shards) == 2
    for shard in shards:
        recorded = (shard.parent / (shard.name + ".sha256")).read_text()
        assert recorded == hashlib.sha256(shard.read_bytes()).hexdigest()
        assert (shard.parent / SETTINGS).is_file()
    with pytest.raises(ConfigError, match="keep_checkpoints=2 or more"):
        RunSpec(keep_checkpoints=1)


def test_asynchronous_checkpoints_are_complete_and_resume(tmp_path):
    """--checkpoint-async async (torchtitan's thread-based async save on gloo): every
    checkpoint ends complete, with its hashes and settings, and a resume continues."""
    out = tmp_path / "run"
    saves = ("--checkpoint-interval", "1", "--checkpoint-async", "async", "--out", str(out))
    assert train("--steps", "3", *saves) == 0
    for step in (1, 2, 3):
        step_dir = out / "checkpoint" / f"step-{step}"
        assert (step_dir / ".metadata").is_file() and (step_dir / SETTINGS).is_file()
        for shard in step_dir.glob("*.distcp"):
            recorded = (shard.parent / (shard.name + ".sha256")).read_text()
            assert recorded == hashlib.sha256(shard.read_bytes()).hexdigest()
    assert train("--steps", "4", *saves, "--resume") == 0
    assert steps_of(out) == [1, 2, 3, 4]
    # each asynchronous save logged once its background write was done, with its bytes
    from qwen3_trn_helpers.training.save_log import measured_write_mb_s

    logged = [json.loads(x) for x in (out / "checkpoint" / "saves.jsonl").read_text().splitlines()]
    assert [e["step"] for e in logged] == [1, 2, 3, 4] and logged[0]["mode"] == "async"
    assert all(e["bytes"] > 0 for e in logged) and measured_write_mb_s(out)[1] == 4


SETTINGS = "qwen3-trn-settings.json"


def test_pinned_memory_async_is_refused_off_cuda(tmp_path, capsys):
    args = ("--steps", "2", "--checkpoint-interval", "1", "--device", "cpu")
    argv = [*args, "--checkpoint-async", "async_with_pinned_mem", "--out", str(tmp_path / "r")]
    assert train(*argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --checkpoint-async async" in err[0], err
