"""What stops setup's main job ends in one line (issue 49): a full disk, wherever a
library raises it from, and any unexpected error whose message spans lines; and the
command's process leaves its objects to the OS at exit (no shutdown collections)."""

from __future__ import annotations

import errno
import sys

import pytest

from qwen3_trn_helpers import cli
from qwen3_trn_helpers.errors import disk_full


class CheckpointWriteFailed(Exception):
    """Stands for a library's own error around the OSError (torch's checkpoint writer
    reports the ranks' failures in one exception, the OSError's text inside)."""


def test_disk_full_is_found_in_the_chain_and_in_a_librarys_text(tmp_path):
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "model.safetensors"))
    assert disk_full(full) == str(tmp_path / "model.safetensors")
    try:
        try:
            raise full
        except OSError as e:
            raise RuntimeError("PytorchStreamWriter failed writing file") from e
    except RuntimeError as wrapped:
        assert disk_full(wrapped) == str(tmp_path / "model.safetensors")
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert disk_full(quota) == ""
    text = CheckpointWriteFailed("rank 0:\nTraceback ...\nOSError: No space left on device")
    assert disk_full(text) == ""
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None
    assert disk_full(ValueError("bad")) is None


@pytest.mark.parametrize(
    ("raised", "line"),
    [
        (
            CheckpointWriteFailed("rank 0 failed:\n  OSError: [Errno 28] No space left on device"),
            "error: the disk is full: No space left on device; free some space, then run the "
            "same command again (what finished is kept)",
        ),
        (
            RuntimeError("first line of a long story\n  frame 1\n  frame 2"),
            "error: unexpected RuntimeError: first line of a long story (rerun with --debug "
            "for the traceback)",
        ),
    ],
)
def test_a_failure_in_a_command_is_one_line(monkeypatch, capsys, tmp_path, raised, line):
    def fails(args):
        raise raised

    monkeypatch.setitem(cli.COMMANDS, "reproduce", fails)
    assert cli.main(["reproduce", "--out", str(tmp_path / "r")]) == 1
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_full_disk_names_the_file_and_its_free_space(monkeypatch, capsys, tmp_path):
    where = tmp_path / "published" / "model.safetensors"

    def fails(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(where))

    monkeypatch.setitem(cli.COMMANDS, "reproduce", fails)
    assert cli.main(["reproduce", "--out", str(tmp_path / "r")]) == 1
    (err,) = capsys.readouterr().err.splitlines()
    assert err.startswith(f"error: the disk is full: writing {where} failed (")
    assert " free there); free some space, then run the same command again" in err


@pytest.mark.parametrize(
    ("argv0", "registered"),
    [
        ("/x/.venv/bin/qwen3-trn", True),
        ("/x/qwen3_trn_helpers/__main__.py", True),
        ("/x/.venv/bin/pytest", False),  # a test (or a notebook) calling main(): never
    ],
)
def test_only_the_commands_own_process_skips_collection_at_exit(monkeypatch, argv0, registered):
    import atexit
    import gc

    seen = []
    monkeypatch.setattr(sys, "argv", [argv0])
    monkeypatch.setattr(atexit, "register", seen.append)
    cli.skip_collection_at_exit()
    assert seen == ([gc.freeze] if registered else [])
