"""setup.sh's default install through uv: pip's settings carried over, or pip itself.

The speed is measured, not tested (docs/install.md, docs/benchmarks.md): ~28 s for the
CPU stack from an empty cache against ~80 s for pip. What is tested is what must not change with the
installer: every pip setting a user or a machine has (a mirror, find-links folders, a
constraints file, a CA bundle) still applies, read from pip's own ``pip config list``,
and a setting uv has no equivalent for sends setup back to pip, named.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from qwen3_trn_helpers.ops.installer import UsePip, pip_settings, uv_options

ROOT = Path(__file__).resolve().parents[3]
UV = Path(sys.executable).parent / "uv"


def _pip_config_list(env: dict[str, str]) -> str:
    """pip's own merged view of its configuration, under ``env`` alone."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip


def _isolated_env(**pip_vars: str) -> dict[str, str]:
    """No configuration file of this machine: only the PIP_* variables given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, **pip_vars)
    return env


def test_later_sections_win_as_in_pip_and_other_commands_are_ignored():
    listed = "\n".join([
        "global.index-url='https://global.example/simple'",
        "global.find_links='/a /b'",
        "install.index-url='https://install.example/simple'",
        "download.proxy='http://proxy.example'",
        ":env:.index-url='https://env.example/simple'",
    ])  # fmt: skip
    assert pip_settings(listed) == {
        "index-url": "https://env.example/simple",
        "find-links": "/a /b",
    }


def test_this_kind_of_machine_keeps_its_mirrors_constraints_and_certificates():
    listed = "\n".join([
        ":env:.cert='/etc/ssl/certs/ca-certificates.crt'",
        ":env:.default-timeout='180'",
        ":env:.disable-pip-version-check='1'",
        ":env:.find-links='/opt/wheels'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
    ])  # fmt: skip
    assert uv_options(pip_settings(listed)) == [
        "--index-strategy=unsafe-best-match",
        "--constraint=/etc/xdg/pip/constraints.txt",
        "--extra-index-url=file:///opt/pypi/simple",
        "--extra-index-url=file:///opt/pypi-more/simple",
        "--cert=/etc/ssl/certs/ca-certificates.crt",
        "--find-links=/opt/wheels",
    ]  # fmt: skip


@pytest.mark.parametrize("setting", ["proxy", "no-binary", "require-virtualenv"])
def test_a_setting_uv_would_not_honour_sends_setup_back_to_pip(setting):
    with pytest.raises(UsePip, match=f"sets {setting},"):
        uv_options({"index-url": "https://mirror.example/simple", setting: "x"})


def test_a_value_stays_one_argument_of_its_flag():
    """A value read from pip's configuration never becomes an argument of its own (a
    package uv would install): a line break is refused, and anything else, a command
    substitution, quotes or ../ included, stays glued to its flag as data."""
    with pytest.raises(UsePip, match="cert holds a line break"):
        uv_options({"cert": "/etc/ca.pem\nrequests"})
    odd = "/tmp/$(touch pwned) 'q\"/../ca.pem"
    assert uv_options({"cert": odd, "index-url": ""}) == [
        "--index-strategy=unsafe-best-match", f"--cert={odd}"
    ]  # fmt: skip
    assert uv_options({"find-links": "/a\n/b"}) == [
        "--index-strategy=unsafe-best-match", "--find-links=/a", "--find-links=/b"
    ]  # fmt: skip


def test_the_cli_reads_pips_own_output_and_says_why_in_one_line():
    env = _isolated_env(
        PIP_INDEX_URL="https://mirror.example/simple", PIP_TRUSTED_HOST="mirror.example"
    )
    listed = _pip_config_list(env)
    helper = [sys.executable, "-m", "qwen3_trn_helpers.ops.installer", "uv-options"]
    ok = subprocess.run(helper, input=listed, cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines() == [
        "--index-strategy=unsafe-best-match",
        "--index-url=https://mirror.example/simple",
        "--allow-insecure-host=mirror.example",
    ]  # fmt: skip
    proxied = _pip_config_list(_isolated_env(PIP_PROXY="http://proxy.example:3128"))
    refused = subprocess.run(helper, input=proxied, cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 3
    assert refused.stdout.strip().splitlines() == [
        "pip's configuration sets proxy, which setup does not pass to uv"
    ]


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A one-module pure-Python wheel, written as the wheel format says (PEP 427)."""
    dist = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.py", f"VERSION = {version!r}\n")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{dist}/RECORD", "")
    return path


@pytest.mark.skipif(
    not UV.exists(), reason="this venv was installed by pip (QWEN3_TRN_INSTALLER=pip)"
)
def test_uv_installs_what_pips_settings_say(tmp_path):
    """A find-links folder, no index and a constraints file, set for pip only: uv, given
    the options read from pip, installs from that folder the version the constraint
    allows (1.0, not the newer 2.0 beside it)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "qwen3_trn_probe", "1.0")
    _wheel(wheels, "qwen3_trn_probe", "2.0")
    (tmp_path / "constraints.txt").write_text("qwen3_trn_probe<2\n")
    env = _isolated_env(
        PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
        PIP_CONSTRAINT=str(tmp_path / "constraints.txt"),
    )  # fmt: skip
    options = uv_options(pip_settings(_pip_config_list(env)))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    uv_env = {**env, "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_OFFLINE": "1"}
    subprocess.run(
        [str(UV), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
         *options, "qwen3_trn_probe"],
        env=uv_env, check=True, timeout=120,
    )  # fmt: skip
    got = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import qwen3_trn_probe as p; print(p.VERSION)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert got == "1.0"
