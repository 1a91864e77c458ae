"""``reproduce --stack torchtitan-neuron``: AWS's fork, found and run in a child process.

The fork is a stand-in here: a package registered under the fork's module name
(``torchtitan_neuron.models.qwen3.config_registry``) on PYTHONPATH, whose Qwen3 entries
return tiny torchtitan configurations. Everything else is real: the registry is read
in a child interpreter, torchrun runs ``-m torchtitan.train --module ... --config ...``
with our weights and data flags, and the losses come from torchtitan's log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.lessons import aws_stack

ROOT = Path(__file__).resolve().parents[2]

# recorded: torchtitan 0.3.0's step line (components/metrics.py), colours on
LOG = (
    "[titan] 2026-12-01 01:16:05,101 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: "
    "12.43512  \x1b[33mgrad_norm:  2.1134  \x1b[34mmemory:  2.09GiB(1.63%)  \x1b[34mtps: "
    "100  \x1b[36mtflops: 0.00  \x1b[35mmfu: 0.00%\x1b[39m\n"
    "[titan] ... - \x1b[33mvalidate step:  1  \x1b[32mloss:  9.00000\x1b[39m\n"
    "[titan] ... - step: 10  loss:  6.54000  grad_norm:  1.0000  memory: 20.00GiB\n"
)


def test_losses_are_read_from_torchtitans_log():
    assert aws_stack.parse_losses(LOG) == {1: 12.43512, 10: 6.54}


def test_the_fork_configuration_is_the_presets_size():
    names = ["qwen3_0_6b_debug", "qwen3_4b_debug", "qwen3_4b_tp4_fsdp16_sac",
             "qwen3_8b_tp4_fsdp16_sac", "qwen3_14b_tp4_fsdp16_sac"]  # fmt: skip
    assert aws_stack.choose_config(names, "4b") == "qwen3_4b_tp4_fsdp16_sac"
    with pytest.raises(ConfigError, match="no Qwen3-4B configuration .* qwen3_8b_tp4"):
        aws_stack.choose_config(["qwen3_8b_tp4_fsdp16_sac", "qwen3_14b_tp4"], "4b")


def test_no_neuron_python_is_one_error(monkeypatch, tmp_path):
    monkeypatch.delenv("QWEN3_TRN_NEURON_PYTHON", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert aws_stack.neuron_python() is None
    from qwen3_trn_helpers.training.spec import RunSpec

    with pytest.raises(ConfigError, match="no Neuron venv interpreter known"):
        aws_stack.reproduce_on_fork(RunSpec(out=str(tmp_path / "r")))


def test_a_missing_fork_is_one_error():
    with pytest.raises(ConfigError, match="fork is not importable by .* pip install -e"):
        aws_stack.fork_configs(sys.executable)  # this venv has no torchtitan_neuron


@pytest.fixture
def fork_on_path(tmp_path):
    """A stand-in for aws-neuron/torchtitan-neuron: its module name, tiny configs."""
    registry = tmp_path / "fork" / "torchtitan_neuron" / "models" / "qwen3"
    registry.mkdir(parents=True)
    for folder in (registry.parents[1], registry.parent, registry):
        (folder / "__init__.py").write_text("")
    (registry / "config_registry.py").write_text(
        '"""Stand-in for the fork\'s Qwen3 registry: tiny torchtitan configurations."""\n'
        "from qwen3_trn_helpers.config_registry import build_config\n\n\n"
        "def qwen3_tiny_fsdp():\n    return build_config('native', 'tiny')\n\n\n"
        "def qwen3_8b_tp4_fsdp16_sac():\n    raise AssertionError('not the preset size')\n"
    )
    return tmp_path / "fork"


@pytest.mark.long
@pytest.mark.slow
def test_reproduce_on_the_fork_shows_both_stacks(fork_on_path, tmp_path):
    out = tmp_path / "repro"
    out.mkdir()
    # what `qwen3-trn reproduce --out repro` wrote for our stack (its summary rows)
    (out / "summary.json").write_text(
        json.dumps(
            {
                "summary": [
                    {"init": "pretrained", "step-1 loss": 6.9},
                    {"init": "random", "step-1 loss": 12.1},
                ]
            }
        )
    )
    env = {**os.environ, "QWEN3_TRN_NEURON_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(fork_on_path), str(ROOT)])}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", "reproduce", "--stack", "torchtitan-neuron",
         "--steps", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((out / "torchtitan-neuron" / "stacks.json").read_text())
    assert result["config"] == "qwen3_tiny_fsdp" and result["python"] == sys.executable
    losses = result["losses"]
    assert [sorted(map(int, losses[i])) for i in ("pretrained", "random")] == [[1, 2, 3]] * 2
    # the same weights as our pretrained run: far below random init's ~ln V
    assert losses["pretrained"]["1"] < losses["random"]["1"] - 2
    command = result["commands"]["pretrained"]
    assert command[command.index("--module") + 1] == "torchtitan_neuron.models.qwen3"
    assert "--checkpoint.initial-load-path" in command
    assert "--checkpoint.initial-load-path" not in result["commands"]["random"]
    rows = {(r["stack"].split()[0], r["init"]): r for r in result["rows"]}
    assert rows[("qwen3-trn", "pretrained")]["step-1 loss"] == 6.9
    assert rows[("torchtitan-neuron", "random")]["AWS step 1"] == 12.43
    assert "torchtitan-neuron (qwen3_tiny_fsdp)" in proc.stdout


@pytest.mark.slow
def test_doctor_says_when_the_fork_is_installed(fork_on_path):
    env = {**os.environ, "PYTHONPATH": str(fork_on_path)}
    proc = subprocess.run([sys.executable, "-m", "qwen3_trn_helpers", "doctor"],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"torchtitan_fork      {fork_on_path / 'torchtitan_neuron'}" in proc.stdout
    assert "warning: AWS's torchtitan fork is installed" in proc.stdout


@pytest.mark.parametrize("where", ["config_registry", "bare module"])
def test_fork_configs_are_found_as_torchtitans_loader_finds_them(tmp_path, where):
    """torchtitan's loader imports MODULE.config_registry, else MODULE itself: a fork
    that keeps its configurations in the module's __init__ is listed the same way."""
    package = tmp_path / "torchtitan_neuron" / "models" / "qwen3"
    package.mkdir(parents=True)
    for folder in (package.parents[1], package.parent):
        (folder / "__init__.py").write_text("")
    configs = "def qwen3_8b_tp4():\n    pass\n\n\ndef helper():\n    pass\n"
    if where == "config_registry":
        (package / "__init__.py").write_text("")
        (package / "config_registry.py").write_text(configs)
    else:
        (package / "__init__.py").write_text(configs)
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    assert aws_stack.fork_configs(str(script)) == ["qwen3_8b_tp4"]
