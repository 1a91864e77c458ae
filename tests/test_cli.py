"""The console script as a user runs it: real subprocesses, one error line."""

import json
import subprocess
import sys

import pytest


def cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_train_writes_metrics_and_plot(tmp_path):
    out = tmp_path / "run"
    proc = cli(
        "train",
        "--variant",
        "native",
        "--steps",
        "2",
        "--local-batch-size",
        "1",
        "--init",
        "random",
        "--out",
        str(out),
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out / "loss.png") in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--steps", "0"], "--steps: must be a positive integer"),
        (["train", "--steps", "ten"], "expected a positive integer"),
        (["train", "--variant", "gpt2"], "invalid choice: 'gpt2'"),
        (["train", "--seq-len", "1000000", "--steps", "1"], "beyond the model's context"),
        (["train", "--device", "neuron", "--steps", "1"], "no Trainium device is visible"),
        (["train", "--corpus", "/no/such/file.txt", "--steps", "1"], "does not exist"),
        (["train", "--nproc", "2", "--out", ""], "needs --out"),
        (["train", "--attention", "flex", "--steps", "1"], "FlexAttention"),
        (["fly"], "invalid choice: 'fly'"),
    ],
)
def test_bad_input_is_one_error_line(args, message, tmp_path):
    if args[0] == "train" and "--out" not in args:
        args = [*args, "--out", str(tmp_path / "o")]
    if args[-2:] == ["--out", ""]:
        args = args[:-2]
    proc = cli(*args)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


def test_doctor_prints_report():
    proc = cli("doctor")
    assert proc.returncode == 0
    assert "device_type" in proc.stdout and "torchtitan" in proc.stdout


def test_debug_after_the_command_shows_the_traceback(tmp_path):
    proc = cli("train", "--steps", "1", "--seq-len", "1000000", "--out", str(tmp_path), "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr
    assert "beyond the model's context" in proc.stderr
