"""What keeps the README test command's setup short (scripts/setup.sh, scripts/test.sh).

pip byte-compiles every .py file it installs one after another unless told not to:
about 19,500 files here, measured at ~111 s of CPU on a 2-core box, for a run that
imports a fifth of them. Every pip install in setup.sh passes ``--no-compile`` and
nothing compiles the whole venv (a ``compileall -j 0`` took 37 s there); Python caches
each module at its first import instead. That needs PYTHONDONTWRITEBYTECODE unset: set,
nothing is cached and every process compiles what it imports again (the trainer's import
took 17 s instead of 8), so scripts/test.sh unsets it for everything it starts.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
SETUP = SCRIPTS / "setup.sh"


def _pip_installs(text: str) -> list[str]:
    """Each command line of setup.sh that runs ``pip install`` (not its echo lines)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("#", "echo"))]
    return [line for line in lines if re.search(r"-m pip install\b", line)]


def test_every_pip_install_in_setup_skips_byte_compilation():
    text = SETUP.read_text()
    installs = _pip_installs(text)
    assert len(installs) == 3  # the wheelhouse, the CPU-only torch, the package itself
    assert re.search(r'^nocompile="--no-compile"$', text, re.M)
    for line in installs:
        assert "$nocompile" in line, line


def _commands(path: Path) -> list[str]:
    """The script's lines, comments blanked (so line numbers stay)."""
    return ["" if ln.lstrip().startswith("#") else ln for ln in path.read_text().splitlines()]


def test_nothing_compiles_the_whole_venv():
    assert not [line for line in _commands(SETUP) if "compileall" in line]


def test_the_suite_caches_byte_code_from_its_first_import():
    lines = _commands(SCRIPTS / "test.sh")
    unset = [i for i, line in enumerate(lines) if line.strip() == "unset PYTHONDONTWRITEBYTECODE"]
    assert len(unset) == 1
    # before setup.sh (which prepares the assets) and before any pytest
    first_python = min(i for i, ln in enumerate(lines) if "setup.sh" in ln or "pytest" in ln)
    assert unset[0] < first_python


def test_this_suite_writes_byte_code_where_run_by_its_script():
    """Under scripts/test.sh this process and its children cache what they import."""
    if not os.environ.get("QWEN3_TRN_TEST_SCRIPT"):
        pytest.skip("run directly, not by scripts/test.sh")
    assert not os.environ.get("PYTHONDONTWRITEBYTECODE")
    assert sys.dont_write_bytecode is False
