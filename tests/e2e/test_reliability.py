"""Nothing is lost: NaN stops cleanly, Ctrl-C keeps every finished step, resume is exact."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen3_trn_helpers import run
from qwen3_trn_helpers.errors import ConfigError, NonFiniteLoss, RunFolderError
from qwen3_trn_helpers.runs.folder import latest_checkpoint_step
from qwen3_trn_helpers.training.metrics_file import read_metrics


def test_nan_loss_stops_at_that_step_and_keeps_earlier_ones(tmp_path):
    with pytest.raises(NonFiniteLoss, match=r"loss became nan at step (\d+)") as info:
        run(steps=8, lr=1e8, out=str(tmp_path / "nan"), progress=False)
    step = info.value.step
    assert step > 1
    records = read_metrics(tmp_path / "nan" / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, step))
    manifest = json.loads((tmp_path / "nan" / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["steps_completed"] == step - 1


@pytest.mark.slow
def test_ctrl_c_leaves_valid_metrics_for_every_completed_step(tmp_path):
    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--steps", "60",
           "--out", str(out), "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
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


@pytest.mark.slow
def test_resume_reproduces_the_uninterrupted_curve(tmp_path):
    whole = run(steps=4, checkpoint_interval=2, out=str(tmp_path / "whole"), progress=False)

    def stop_at_3(record):
        if record["step"] == 3:
            raise KeyboardInterrupt

    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run(steps=4, checkpoint_interval=2, out=str(cut), progress=False, on_step=stop_at_3)
    assert [r["step"] for r in read_metrics(cut / "metrics.jsonl")] == [1, 2, 3]
    # a half-written later checkpoint (no .metadata) does not count, as for torchtitan
    (cut / "checkpoint" / "step-3").mkdir()
    assert latest_checkpoint_step(cut) == 2
    resumed = run(steps=4, checkpoint_interval=2, out=str(cut), resume=True, progress=False)
    assert [m["step"] for m in resumed.metrics] == [1, 2, 3, 4]  # 3 not doubled
    assert resumed.losses == pytest.approx(whole.losses, abs=1e-6)
    manifest = json.loads((cut / "run.json").read_text())
    assert manifest["resumed_from_step"] == 2


@pytest.mark.slow
@pytest.mark.long
def test_launched_resume_reports_each_retrained_step_once(tmp_path):
    """2 ranks: the parent follows metrics.jsonl; the interrupted run's later lines
    (steps after the checkpoint) must not reach the progress bar or on_step."""
    out = tmp_path / "two"
    fast = {"steps": 4, "nproc": 2, "checkpoint_interval": 2, "seq_len": 64, "out": str(out)}
    first = run(**fast, progress=False)
    shutil.rmtree(out / "checkpoint" / "step-4")  # as if stopped after step 4's line
    seen = []
    resumed = run(**fast, resume=True, progress=False, on_step=seen.append)
    assert [r["step"] for r in seen] == [3, 4]
    assert [r["step"] for r in resumed.metrics] == [1, 2, 3, 4]
    assert resumed.losses == pytest.approx(first.losses, abs=1e-5)


def test_resume_needs_a_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="resume needs checkpoints"):
        run(steps=2, out=str(tmp_path), resume=True, progress=False)
    with pytest.raises(RunFolderError, match="nothing to resume"):
        run(steps=2, out=str(tmp_path), resume=True, checkpoint_interval=1, progress=False)


@pytest.mark.slow
def test_overwrite_starts_fresh_even_with_checkpoints(tmp_path):
    """torchtitan loads the newest checkpoint in its dump folder: --overwrite removes it."""
    out = str(tmp_path / "d")
    first = run(steps=2, checkpoint_interval=1, out=out, progress=False)
    # the first run's own settings: resumed from its step-2 checkpoint it would train
    # nothing; from its weights, with another curve
    again = run(steps=2, checkpoint_interval=1, out=out, overwrite=True, progress=False)
    assert again.losses == pytest.approx(first.losses, abs=1e-6)
    assert [m["step"] for m in again.metrics] == [1, 2]


def test_cpu_requested_on_a_host_with_an_accelerator_trains_on_the_cpu(tmp_path, monkeypatch):
    """torchtitan picks its device at import; --device cpu must not train elsewhere."""
    import torch
    from torchtitan.tools import utils

    from qwen3_trn_helpers.device import resolve_device
    from qwen3_trn_helpers.training.patches import run_patches

    with monkeypatch.context() as gpu_host:
        gpu_host.setattr(torch.cuda, "is_available", lambda: True)
        assert resolve_device("auto") == "cuda" and resolve_device("cpu") == "cpu"
        # what a run planned for the CPU does to torchtitan, whatever torch reports
        with run_patches((), "cpu", 1):
            assert utils.device_type == "cpu"
    # torchtitan's own choice on this machine is "cuda" too (its fallback), so a real
    # run asked for the CPU exercises the same path; it would fail at set_device if it
    # trained anywhere else
    assert utils.device_type == "cuda"
    result = run(steps=1, device="cpu", out=str(tmp_path / "c"), progress=False)
    assert result.plan.device_type == "cpu" and len(result.losses) == 1
    manifest = json.loads((tmp_path / "c" / "run.json").read_text())
    assert manifest["resolved"]["device"] == "cpu"


def test_stopping_a_launch_stops_the_workers_too():
    """torchrun's workers hold NeuronCores on trn2: a stopped launch must end them all."""
    from qwen3_trn_helpers.runs.child import stop_process_group

    proc = subprocess.Popen(
        ["bash", "-c", "sleep 300 & echo $!; wait"],  # a launcher with one worker
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    worker = int(proc.stdout.readline())
    stop_process_group(proc, grace_s=5)
    assert proc.poll() is not None
    stat = Path(f"/proc/{worker}/stat")
    for _ in range(50):  # gone, or dead and waiting to be reaped (state Z)
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the launcher's worker outlived stop_process_group")


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live (not zombie) processes whose arguments contain ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if text in cmdline and state != "Z":
            found.append(cmdline)
    return found


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize(
    ("sig", "status", "code"),
    [(signal.SIGTERM, "terminated", 143), (signal.SIGINT, "interrupted", 130)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_stop_signal_to_the_cli_ends_every_process_of_a_launched_run(tmp_path, sig, status, code):
    """SIGTERM is what `timeout`, Slurm's scancel and Kubernetes send; SIGINT is Ctrl-C.
    Either way torchrun and both ranks end, and run.json says which."""
    out = tmp_path / status
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--nproc", "2", "--steps",
           "200", "--out", str(out), "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
    )  # fmt: skip
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 180
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        assert time.time() < deadline and proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.2)
    assert len(_processes_mentioning(str(out))) >= 4  # the CLI, torchrun, 2 ranks
    proc.send_signal(sig)  # to the CLI alone, as `timeout` does
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith(f"{status}:")
    for _ in range(50):
        if not _processes_mentioning(str(out)):
            break
        time.sleep(0.1)
    assert not _processes_mentioning(str(out)), "a process of the run outlived SIGTERM"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == status and manifest["steps_completed"] == len(records)
