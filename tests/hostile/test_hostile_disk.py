"""A full disk names the file and the free space, and keeps every step written before
it (a tmpfs of 1 MiB where the machine lets this user mount one)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from hostile import one_error_line

from qwen3_trn_helpers import run
from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import RunFolderError, TrainingError
from qwen3_trn_helpers.training import metrics_file
from qwen3_trn_helpers.training.metrics_file import (
    read_metrics,
    scan_metrics,
    write_atomically,
)


def steps_in(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl")]


# --- a full disk names the file and the free space ---------------------------------------


def _full_disk_for(monkeypatch, name: str, after: int = 0) -> None:
    """os.write into a file called ``name`` fails with ENOSPC (half the bytes written
    first, as a disk filling mid-write does) once ``after`` writes into it succeeded."""
    real_write, done = os.write, [0]

    def write(fd: int, data) -> int:
        try:
            target = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            target = ""
        if target == name:
            done[0] += 1
            if done[0] > after:
                real_write(fd, bytes(data)[: len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc")
def test_a_full_disk_while_writing_metrics_is_one_line_and_keeps_the_steps(
    tmp_path, monkeypatch, capsys
):
    _full_disk_for(monkeypatch, "metrics.jsonl", after=1)  # step 2's line fails
    out = tmp_path / "run"
    assert main(["train", "--steps", "3", "--out", str(out), "--no-progress"]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: writing {out / 'metrics.jsonl'} failed (No space left")
    assert " free there): it holds every step before step 2; free some space" in line
    assert (out / "metrics.jsonl").read_bytes().endswith(b"\n")  # the torn half cut off
    assert scan_metrics(out / "metrics.jsonl") == (read_metrics(out / "metrics.jsonl"), [])
    assert steps_in(out) == [1]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and "No space left" in info["error"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc")
def test_a_full_disk_while_writing_run_json_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    path.write_text('{"status": "running"}')
    _full_disk_for(monkeypatch, ".run.json.tmp")
    with pytest.raises(RunFolderError) as refused:
        write_atomically(path, '{"status": "completed"}')
    assert str(refused.value).startswith(f"writing {path} failed (No space left on device; ")
    assert "run.json keeps what it held" in str(refused.value)
    assert path.read_text() == '{"status": "running"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary left


def test_free_space_is_said_in_units():
    assert metrics_file.free_space("/").split()[1] in ("B", "KiB", "MiB", "GiB")
    assert metrics_file.free_space("/no/such/folder") == "unknown"


@pytest.fixture
def tiny_disk(tmpfs):
    """A 1 MiB tmpfs."""
    return tmpfs("1m")


def _fill(disk: Path) -> None:
    """Take every free byte of ``disk``."""
    with open(disk / "filler", "ab", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def test_a_run_into_a_full_disk_is_one_line_naming_run_json(tiny_disk, capsys):
    """A real ENOSPC before the first step: run.json's write names the file."""
    _fill(tiny_disk)
    out = tiny_disk / "run"
    assert main(["train", "--steps", "1", "--out", str(out), "--no-progress"]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: writing {out / 'run.json'} failed (No space left on device")
    assert "0 B free there" in line and not (out / "run.json").exists()


@pytest.mark.slow
@pytest.mark.long
def test_a_disk_that_fills_during_a_run_keeps_every_step_before(tiny_disk, capsys):
    """A real ENOSPC mid-run: the disk filled after step 1, metrics.jsonl fails when its
    lines first need another page of the tmpfs (about step 17)."""
    out = tiny_disk / "run"

    def fill(record):
        if record["step"] == 1:
            _fill(tiny_disk)

    with pytest.raises(TrainingError) as failed:
        run(steps=40, seq_len=64, out=str(out), progress=False, on_step=fill)
    message, step = str(failed.value), failed.value.step
    assert message.startswith(f"writing {out / 'metrics.jsonl'} failed (No space left on device")
    assert "0 B free there" in message and f"every step before step {step}" in message
    assert 2 < step < 40 and steps_in(out) == list(range(1, step))
    assert (out / "metrics.jsonl").read_bytes().endswith(b"\n")
    assert json.loads((out / "run.json").read_text())["status"] == "running"  # (no room)
