"""The console script as a user runs it: one error line for every mistake.

End to end in a real subprocess for a training run; the error cases call the same
``main()`` in this process (the same code path, without paying a torch import each).
"""

import json
import os
import subprocess
import sys

import pytest

from qwen3_trn_helpers.cli import main


def cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_train_writes_metrics_and_plot(tmp_path):
    out = tmp_path / "run"
    proc = cli("train", "--steps", "2", "--init", "random", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out / "loss.png") in proc.stdout
    assert proc.stderr.count("Traceback") == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--steps", "0"], "--steps: must be a positive integer"),
        (["train", "--steps", "ten"], "expected a positive integer"),
        (["train", "--lr", "-1"], "--lr: must be positive"),
        (["train", "--variant", "gpt2"], "invalid choice: 'gpt2'"),
        (["train", "--seq-len", "1000000", "--steps", "1"], "beyond the model's context"),
        (["train", "--device", "neuron", "--steps", "1"], "no Trainium device is visible"),
        (["train", "--corpus", "/no/such/file.txt", "--steps", "1"], "does not exist"),
        (["train", "--nproc", "2", "--out", ""], "needs --out"),
        (["train", "--attention", "flex", "--steps", "1"], "FlexAttention"),
        (["train", "--resume", "--steps", "1"], "resume needs checkpoints"),
        (["fly"], "invalid choice: 'fly'"),
    ],
)
def test_bad_input_is_one_error_line(args, message, tmp_path, capsys):
    if args[0] == "train" and "--out" not in args:
        args = [*args, "--out", str(tmp_path / "o")]
    if args[-2:] == ["--out", ""]:
        args = args[:-2]
    try:
        status = main(args)
    except SystemExit as e:  # argparse's errors exit
        status = e.code
    assert status != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert message in lines[0]
    assert not (tmp_path / "o" / "metrics.jsonl").exists()


def test_doctor_prints_report(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "device_type" in out and "torchtitan" in out and "GFLOP/s" in out


def test_debug_after_the_command_shows_the_traceback(tmp_path):
    with pytest.raises(Exception, match="beyond the model's context"):
        main(["train", "--steps", "1", "--seq-len", "1000000", "--out", str(tmp_path), "--debug"])


def test_offline_mode_lasts_for_one_command_only(monkeypatch, tmp_path, capsys):
    """The CLI turns the hub off for the command it runs, not for the whole process (a
    notebook calling cli.main keeps its own setting), and a user's own choice stands."""
    import huggingface_hub
    import huggingface_hub.constants as hub

    from qwen3_trn_helpers import cli
    from qwen3_trn_helpers.hub import hub_offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    with hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == "1" and huggingface_hub.is_offline_mode()
    assert "HF_HUB_OFFLINE" not in os.environ and not huggingface_hub.is_offline_mode()

    seen = {}
    monkeypatch.setattr(
        "qwen3_trn_helpers.lessons.logits_parity.parity",
        lambda *a, **k: seen.update(offline=huggingface_hub.is_offline_mode()) or 1 / 0,
    )
    assert cli.main(["parity", "--init", str(tmp_path)]) != 0  # offline while it ran
    assert seen == {"offline": True}
    assert "HF_HUB_OFFLINE" not in os.environ and not huggingface_hub.is_offline_mode()

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the user's own choice: left alone
    with hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == "0" and not huggingface_hub.is_offline_mode()
