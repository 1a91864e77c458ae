"""AWS's own stack side by side: the same 10 steps on aws-neuron/torchtitan-neuron.

AWS's TorchTitan docs (Neuron 2.33, beta) install its fork into the Neuron venv (clone
aws-neuron/torchtitan-neuron, ``pip install -e .``, which makes *its* ``torchtitan``
importable there) and train Qwen3 with ``torchrun ... -m torchtitan.train --module
torchtitan_neuron.models.qwen3 --config qwen3_8b_tp4_fsdp16_sac`` (eager). Our ``.venv``
runs upstream torchtitan 0.3.0 and shadows the fork, so the fork runs here in the Neuron
venv's own interpreter, as a child process, with AWS's own configuration: we pick the
Qwen3-4B entry of the fork's config registry *at run time* (its names are not
documented beyond the 8B one) and override only what makes the runs comparable with
ours: 10 steps, local batch 1, the same sequence length, the same weights (the folder
our ``pretrained`` run loads) and the same data and tokenizer. The losses come from
torchtitan's own log lines (``step: 1  loss: ...``), so nothing of ours runs inside the
fork's process.

The flags are upstream torchtitan's config fields (the fork is "an extension of
pytorch/torchtitan" with registry-style configs); a fork that renamed one fails with its
own error line, which we show.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, TrainingError
from ..files import MiB, read_json

FORK_MODULE = "torchtitan_neuron.models.qwen3"
#: the configuration AWS's TorchTitan docs verify the install with (Qwen3-8B)
AWS_DOCUMENTED_CONFIG = "qwen3_8b_tp4_fsdp16_sac"
NEURON_PYTHON_FILE = "neuron-python"  # written into .venv by scripts/setup.sh on trn2

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"(?<!validate )step:\s*(\d+)\s+loss:\s*(-?[0-9.]+(?:e[-+]?\d+)?|nan|inf)")


def neuron_python() -> str | None:
    """The Neuron venv's interpreter: ``QWEN3_TRN_NEURON_PYTHON``, else the one setup.sh
    recorded in ``.venv/neuron-python`` on trn2; None when neither exists."""
    given = os.environ.get("QWEN3_TRN_NEURON_PYTHON")
    if given:
        return given
    recorded = Path(sys.prefix) / NEURON_PYTHON_FILE
    if recorded.exists():
        return recorded.read_text().strip() or None
    return None


#: the fork's configurations, found as torchtitan's own loader (config/manager.py)
#: finds a fully qualified --module's: its ``config_registry`` submodule, else the bare
#: module itself
_LIST_CONFIGS = f"""
import importlib, inspect, json
for candidate in ("{FORK_MODULE}.config_registry", "{FORK_MODULE}"):
    try:
        registry = importlib.import_module(candidate)
        break
    except ImportError:
        continue
else:
    raise ImportError("cannot import {FORK_MODULE}.config_registry or {FORK_MODULE}")
print(json.dumps(sorted(n for n, f in vars(registry).items()
                        if inspect.isfunction(f) and n.startswith("qwen3"))))
"""


def fork_configs(python: str) -> list[str]:
    """The Qwen3 configurations in the fork's registry, asked in ``python``'s process."""
    from ..runs.child import run_child

    listed = run_child([python, "-c", _LIST_CONFIGS], timeout=300)
    if not listed.ok:
        said = listed.error_line()
        raise ConfigError(
            f"AWS's torchtitan fork is not importable by {python} ({said}); install it into "
            "the Neuron venv as AWS's TorchTitan docs do (git clone "
            "aws-neuron/torchtitan-neuron; pip install -e .), or set QWEN3_TRN_NEURON_PYTHON"
        )
    return json.loads(listed.output.strip().splitlines()[-1])


def choose_config(names: list[str], size: str = "4b") -> str:
    """The fork's configuration for our preset's model size: a name with ``size``
    (Qwen3-4B: the weights both stacks load), preferring AWS's documented layout words
    (tp4, fsdp16, sac). No such entry is an error: another model would not load our
    weights."""
    sized = [n for n in names if f"_{size}_" in f"_{n}_"]
    if not sized:
        raise ConfigError(
            f"the fork's registry ({FORK_MODULE}) has no Qwen3-{size.upper()} configuration "
            f"(it has: {', '.join(names) or 'none'}); its documented one, "
            f"{AWS_DOCUMENTED_CONFIG}, is another model and cannot load the same weights"
        )
    return max(sized, key=lambda n: sum(w in n for w in ("tp4", "fsdp16", "sac")))


def parse_losses(log: str) -> dict[int, float]:
    """step -> loss from torchtitan's log (``step:  1  loss: 12.43210  ...``)."""
    losses: dict[int, float] = {}
    for line in log.splitlines():
        match = _STEP.search(_ANSI.sub("", line))
        if match:
            losses[int(match.group(1))] = float(match.group(2))
    return losses


@dataclass(frozen=True)
class ForkRun:
    """One run of the fork: what it was given and the losses its log printed."""

    init: str
    config: str
    command: list[str]
    losses: dict[int, float]
    log: Path


def fork_command(
    python: str,
    config: str,
    *,
    nproc: int,
    steps: int,
    seq_len: int,
    out: Path,
    dataset: str,
    dataset_path: str | None,
    tokenizer_dir: str,
    init_dir: str | None,
) -> list[str]:
    """torchrun over ``-m torchtitan.train`` with the fork's module and configuration
    (runs/launch.py builds the torchrun part, as for our own runs)."""
    from ..runs.launch import torchrun

    fork = ["-m", "torchtitan.train", "--module", FORK_MODULE, "--config", config,
            "--training.steps", str(steps), "--training.local-batch-size", "1",
            "--training.seq-len", str(seq_len), "--metrics.log-freq", "1",
            "--dump-folder", str(out), "--hf-assets-path", tokenizer_dir,
            "--dataloader.dataset", dataset]  # fmt: skip
    cmd = torchrun(fork, nproc=nproc, python=python)
    if dataset_path:
        cmd += ["--dataloader.dataset-path", dataset_path]
    if init_dir:
        cmd += ["--checkpoint.enable", "--checkpoint.load-only",
                "--checkpoint.initial-load-path", init_dir, "--checkpoint.initial-load-in-hf",
                "--checkpoint.initial-load-model-only"]  # fmt: skip
    return cmd


def run_fork(
    python: str, config: str, init: str, out: Path, *, env: dict[str, str], **flags
) -> ForkRun:
    """One fork run in its own process; TrainingError with its last error line if it fails."""
    from ..runs.child import run_child

    out.mkdir(parents=True, exist_ok=True)
    cmd = fork_command(python, config, out=out, **flags)
    log = out / "fork.log"
    result = run_child(cmd, log=log, env=env, timeout=6 * 3600)
    losses = parse_losses(result.output)
    if not result.ok or len(losses) < flags["steps"]:
        said = result.error_line() if not result.ok else f"{len(losses)} loss lines"
        raise TrainingError(f"the fork's {init} run ({config}) failed: {said} (log: {log})")
    return ForkRun(init, config, cmd, losses, log)


def ours_step1(out: Path) -> dict[str, float]:
    """Our stack's step-1 losses from ``OUT/summary.json`` (``qwen3-trn reproduce``)."""
    try:
        summary = read_json(out / "summary.json", limit=16 * MiB, fix="")
    except (OSError, ValueError):  # (files.py: a pipe, bytes, JSON too deep, ...)
        return {}
    return {row["init"]: row["step-1 loss"] for row in summary.get("summary", [])}


STACK_DIR = "torchtitan-neuron"


def reproduce_on_fork(spec, *, python: str | None = None) -> dict:
    """Both 10-step runs on AWS's fork, with our reproduction's preset, weights and data.

    Returns (and writes to ``OUT/torchtitan-neuron/stacks.json``) the step-1 losses of
    both stacks (ours from ``OUT/summary.json`` when ``qwen3-trn reproduce`` has run
    there) next to AWS's 6.54 / 12.43.
    """
    from ..data.corpus import dataset_args
    from ..device import as_device, resolve_device
    from ..runs.launch import child_environment
    from ..runs.weights import init_folder
    from ..training.plan import plan_run
    from .reproduction import AWS_STEP1, INITS, reproduction_specs

    python = python or neuron_python()
    if python is None:
        raise ConfigError(
            "no Neuron venv interpreter known: run scripts/setup.sh from the Neuron venv "
            "(it records it in .venv/neuron-python) or set QWEN3_TRN_NEURON_PYTHON"
        )
    device_type = resolve_device(spec.device)
    specs = reproduction_specs(spec, device_type)
    out = Path(specs["random"].out).parent
    preset_name = specs["random"].preset
    config = choose_config(fork_configs(python), size=preset_name.split("-")[0])
    # one thread per rank unless set
    env = child_environment(neuron=as_device(device_type).is_trn2, threads=1)
    runs = {}
    for init in INITS:
        plan = plan_run(specs[init].replace(out=None, overwrite=False))
        init_dir = init_folder(plan)
        dataset, dataset_path = dataset_args(plan.corpus, streams=plan.corpus_streams)
        runs[init] = run_fork(
            python, config, init, out / STACK_DIR / init, env=env,
            nproc=plan.nproc, steps=plan.spec.steps, seq_len=plan.seq_len,
            dataset=dataset, dataset_path=dataset_path,
            tokenizer_dir=str(plan.tokenizer_dir),
            init_dir=str(init_dir) if init_dir else None,
        )  # fmt: skip
    ours = ours_step1(out)
    rows = [
        {"stack": stack, "init": init, "step-1 loss": loss, "AWS step 1": AWS_STEP1[init]}
        for init in INITS
        for stack, loss in (
            ("qwen3-trn (torchtitan 0.3.0)", ours.get(init)),
            (f"torchtitan-neuron ({config})", round(runs[init].losses[1], 3)),
        )
    ]
    stacks_json = out / STACK_DIR / "stacks.json"
    result = {
        "stacks_json": str(stacks_json),
        "config": config,
        "python": python,
        "preset": preset_name,
        "rows": rows,
        "losses": {init: runs[init].losses for init in INITS},
        "commands": {init: runs[init].command for init in INITS},
    }
    stacks_json.write_text(json.dumps(result, indent=2))
    return result
