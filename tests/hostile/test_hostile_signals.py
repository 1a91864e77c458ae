"""Stops and signals: a launcher killed with -9 takes its ranks with it, and Ctrl-C
during a save on one or several ranks is a Ctrl-C, not a write error. (The probe's
signal rows, tests/hostile/test_hostile_probe.py, stop runs mid-step.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch.distributed.checkpoint as dcp
from hostile import _processes_naming, strict_load
from torch.distributed.checkpoint.api import CheckpointException

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.training.metrics_file import read_metrics

# --- no orphan ranks after a kill -9 of the command ------------------------------------


@pytest.mark.slow
@pytest.mark.long
def test_a_killed_launcher_takes_its_ranks_with_it(tmp_path):
    """kill -9 of `train --nproc 2`: torchrun and both ranks used to train on (parent 1),
    `--overwrite` was accepted meanwhile, and the orphans wrote checkpoints into the new
    run's folder. Now every process of the run is gone within seconds, run.json saying
    so (and until then the folder is refused: the next test)."""
    import signal
    import time

    out = tmp_path / "K"
    cli = subprocess.Popen(
        [sys.executable, "-m", "qwen3_trn_helpers", "train", "--nproc", "2", "--steps", "40",
         "--checkpoint-interval", "5", "--out", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
            assert cli.poll() is None and time.monotonic() < deadline, "the run never trained"
            time.sleep(0.2)
        cli.kill()  # SIGKILL: nothing of ours runs in the launcher any more
        cli.wait()
        killed = time.monotonic()
        while _processes_naming(str(out)):
            assert time.monotonic() - killed < 60, "torchrun or a rank outlived the launcher"
            time.sleep(0.2)
        gone_s = time.monotonic() - killed
    finally:
        for pid in _processes_naming(str(out)):
            os.kill(pid, signal.SIGKILL)
    steps = sorted(p.name for p in (out / "checkpoint").glob("step-*"))
    time.sleep(2)
    assert sorted(p.name for p in (out / "checkpoint").glob("step-*")) == steps
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "terminated", info["status"]
    assert "the command that launched this run" in (out / "launch.log").read_text()
    print(f"every process gone {gone_s:.1f} s after the kill")


# --- Ctrl-C during a save on several ranks ---------------------------------------------


def test_ctrl_c_that_surfaces_as_a_write_error_is_still_a_ctrl_c(
    tmp_path, monkeypatch, capsys, request
):
    """With --nproc 2 a Ctrl-C during a save reached rank 0 as DCP's write error (its
    peer had stopped): the terminal said `interrupted`, run.json `failed`. The stop the
    process received decides, whatever error it caused; each rank's run is the same."""
    import signal

    def save_cut_by_ctrl_c(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)  # the Ctrl-C, swallowed inside a collective
        except KeyboardInterrupt:
            pass
        raise CheckpointException("save failed", {0: (OSError(5, "write failed"), None)})

    monkeypatch.setattr(dcp, "save", save_cut_by_ctrl_c)
    # Ctrl-C as a terminal delivers it: a suite started in the background of a
    # non-interactive shell inherits SIGINT ignored, and the CLI then leaves it so
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    out = tmp_path / "run"
    argv = ["train", "--steps", "3", "--checkpoint-interval", "1", "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("interrupted: ")
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and "error" not in info


def test_a_ctrl_c_on_any_rank_of_a_failed_save_is_a_ctrl_c():
    from qwen3_trn_helpers.training.checkpoint import _interrupted

    write_error = (OSError(5, "write failed"), None)
    assert _interrupted(CheckpointException("x", {0: write_error, 1: (KeyboardInterrupt(), None)}))
    assert not _interrupted(CheckpointException("x", {0: write_error}))


#: makes a step of DCP's checkpoint save slow, as a large checkpoint on a slow disk is: a
#: rank touches ``saving.RANK`` in SLOW_SAVE_DIR as the step (SLOW_SAVE_AT: every rank's
#: ``write_data``, or rank 0's ``finish``, which writes .metadata while the others wait
#: in a collective) begins, waits, then does it for real (the checkpoint is DCP's own).
#: Loaded by the ranks as sitecustomize.
_SLOW_SAVE = """
import os
if os.environ.get("SLOW_SAVE_DIR") and "RANK" in os.environ:
    import time
    from pathlib import Path
    from torch.distributed.checkpoint import filesystem

    name = os.environ["SLOW_SAVE_AT"]
    real = getattr(filesystem._FileSystemWriter, name)

    def slow(self, *args, **kwargs):
        (Path(os.environ["SLOW_SAVE_DIR"]) / f"saving.{os.environ['RANK']}").touch()
        time.sleep(30)
        return real(self, *args, **kwargs)

    setattr(filesystem._FileSystemWriter, name, slow)
"""


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("at, inside", [("write_data", 2), ("finish", 1)])
def test_ctrl_c_during_a_two_rank_save_says_interrupted(tmp_path, at, inside):
    """Ctrl-C while both ranks of `train --nproc 2` write a checkpoint: run.json said
    `failed` with DCP's write error (the terminal `interrupted`). Both now say
    `interrupted`, metrics.jsonl holds complete lines, and no process of the run is left."""
    import signal
    import time

    hooks, saving = tmp_path / "hooks", tmp_path / "saving"
    hooks.mkdir()
    saving.mkdir()
    (hooks / "sitecustomize.py").write_text(_SLOW_SAVE)
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    out = tmp_path / "run"
    cli = subprocess.Popen(
        [sys.executable, "-m", "qwen3_trn_helpers", "train", "--nproc", "2", "--steps", "6",
         "--checkpoint-interval", "2", "--out", str(out), "--no-progress"],
        env={**os.environ, "PYTHONPATH": path, "SLOW_SAVE_DIR": str(saving), "SLOW_SAVE_AT": at},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        while len(list(saving.glob("saving.*"))) < inside:  # the ranks inside the save
            assert cli.poll() is None and time.monotonic() < deadline, cli.stderr.read()
            time.sleep(0.2)
        cli.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends the command
        _, stderr = cli.communicate(timeout=120)
    finally:
        for pid in _processes_naming(str(out)):
            os.kill(pid, signal.SIGKILL)
    assert cli.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("interrupted:"), stderr[-3000:]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and "error" not in info, info
    records = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2], records  # the save of step 2 was cut
    assert info["steps_completed"] == 2
    for line in (out / "metrics.jsonl").read_text().splitlines():
        strict_load(line)
    assert not _processes_naming(str(out))
    assert not (out / "checkpoint" / "step-2" / ".metadata").exists()  # never completed
