"""What keeps the README test command's setup short (scripts/setup.sh).

pip byte-compiles every .py file it installs unless told not to: about 18,700 files
here (torch, jupyterlab, the kubernetes models), measured at ~111 s of the install's
253 s of CPU on the 2-core CI box, most of them never imported by a run. Every pip
install in setup.sh passes ``--no-compile``; Python compiles what is imported, once.
"""

from __future__ import annotations

import re
from pathlib import Path

SETUP = Path(__file__).resolve().parents[3] / "scripts" / "setup.sh"


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
