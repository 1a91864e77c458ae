"""What the hostile tests (tests/*/test_hostile_*.py) ask of every failure: one error
line, JSON a strict reader parses, and no process of the run left behind."""

from __future__ import annotations

import json
import os
import subprocess

import pytest


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "unexpected" not in err[0]
    return err[0]


def strict_load(text: str):
    """JSON as strict readers parse it: NaN / Infinity are errors."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (a run folder's path), as
    the multi-node tests look for leftovers: ``pgrep -f`` (Linux and macOS)."""
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split() if int(pid) != os.getpid()]
