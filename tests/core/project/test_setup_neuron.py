"""N13 of issue 45: scripts/setup.sh's Neuron path says in one line when it cannot be taken.

`--neuron` off trn2, and a Neuron venv older than Neuron SDK 2.33, each stop setup with
one error line before anything is made; the versions it pins include the venv's numpy
(scripts/neuron_versions.py).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _versions_script():
    spec = importlib.util.spec_from_file_location(
        "neuron_versions", ROOT / "scripts" / "neuron_versions.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SDK_2_33 = {"torch": "2.14.0", "torch-neuronx": "2.14.3.0", "neuronx-cc": "2.28.7631.0"}


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({}, None),
        ({"torch-neuronx": "2.14.4.0", "neuronx-cc": "2.29.1.0"}, None),  # newer: fine
        ({"torch-neuronx": "2.14.1.0"}, "torch-neuronx 2.14.1.0"),  # SDK 2.31's
        ({"neuronx-cc": "2.26.6360.0"}, "neuronx-cc 2.26.6360.0"),
        ({"neuronx-cc": None}, "neuronx-cc missing"),
        ({"torch": "2.9.0"}, "torch 2.9.0"),
        ({"torch": "2.15.0"}, "torch 2.15.0 (the SDK's is 2.14)"),
    ],
)
def test_the_version_gate_names_what_falls_short_and_what_to_install(changed, named):
    gate = _versions_script()
    line = gate.gate_line({**SDK_2_33, **changed})
    if named is None:
        assert line is None
        return
    assert line.startswith("error: this Neuron venv has ") and named in line
    assert "Neuron SDK 2.33 or later" in line and "torch-neuronx 2.14.3.0" in line
    assert "\n" not in line


def _stand_in_neuron_venv(root: Path, torch_neuronx: str, neuronx_cc: str | None) -> Path:
    """A venv that sees this test venv's torch (a .pth) and holds a dummy torch_neuronx."""
    venv = root / "aws_neuronx_venv_torch_neuronx_2_14"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.check_output(
            [str(venv / "bin" / "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True,
        ).strip()
    )  # fmt: skip
    import sysconfig

    (site / "test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "torch_neuronx").mkdir()
    (site / "torch_neuronx" / "__init__.py").write_text('"""stand-in"""\n')
    for name, version in (("torch_neuronx", torch_neuronx), ("neuronx_cc", neuronx_cc)):
        if version is not None:
            dist = site / f"{name}-{version}.dist-info"
            dist.mkdir()
            (dist / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"
            )
    return venv


def _setup(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_neuron_flag_off_trn2_is_one_error_line_and_makes_nothing(tmp_path):
    """This CI machine has no /dev/neuron0 and no neuron-ls: `--neuron` stops at once."""
    target = tmp_path / "venv"
    env = {**os.environ, "QWEN3_TRN_VENV": str(target), "PYTHON": sys.executable}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "neuron-ls").exists()
    )
    proc = _setup(["--neuron"], env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("error: --neuron: no Neuron device here"), lines
    assert not target.exists()


def test_neuron_flag_outside_the_neuron_venv_names_the_venv(tmp_path):
    """A trn2 (neuron-ls on PATH here) but a Python without torch-neuronx."""
    target = tmp_path / "venv"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "neuron-ls").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "neuron-ls").chmod(0o755)
    env = {**os.environ, "QWEN3_TRN_VENV": str(target), "PYTHON": sys.executable,
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    proc = _setup(["--neuron"], env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert "cannot import torch_neuronx: activate the Neuron venv" in lines[0]
    assert not target.exists()


def test_setup_refuses_a_neuron_venv_older_than_sdk_2_33(tmp_path):
    """torch-neuronx 2.14.1 and neuronx-cc 2.26 (Neuron SDK 2.31): one line, nothing made
    (torchtitan 0.3.0 used to be installed on top of it, silently)."""
    venv = _stand_in_neuron_venv(tmp_path, "2.14.1.0", "2.26.6360.0")
    target = tmp_path / "project-venv"
    env = {**os.environ, "PYTHON": str(venv / "bin" / "python"), "QWEN3_TRN_VENV": str(target)}
    proc = _setup(["--install-only"], env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert "torch-neuronx 2.14.1.0, neuronx-cc 2.26.6360.0" in lines[0], lines
    assert "Neuron SDK 2.33 or later" in lines[0]
    assert not target.exists()


def test_the_pins_hold_the_neuron_venvs_numpy(tmp_path):
    """What setup pins for pip: torch, torch-neuronx and numpy as the Neuron venv has them."""
    venv = _stand_in_neuron_venv(tmp_path, "2.14.3.0", "2.28.7631.0")
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "scripts" / "neuron_versions.py")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        f"torch=={metadata.version('torch')}",
        "torch-neuronx==2.14.3.0",
        f"numpy=={metadata.version('numpy')}",
    ]
