"""``run(...)``: the one way a run starts, from Python, the notebooks and the CLI.

    from qwen3_trn_helpers import run
    result = run("native", steps=10, init="random")
    result.losses, result.metrics_path

Keyword arguments are RunSpec fields (the same as ``qwen3-trn train``'s flags). ``run``
resolves ``init="pretrained"`` to a folder, checks the memory, then trains in this
process, or, for several ranks, several nodes and on trn2, through torchrun in child
processes. ``run(spec)`` takes a whole RunSpec.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from ..errors import ConfigError
from ..training.spec import Plan, RunSpec
from .folder import RunResult


def make_spec(variant: str | None = None, **params: Any) -> RunSpec:
    """A validated RunSpec, with a clear error for a misspelt parameter."""
    names = {f.name for f in fields(RunSpec)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ConfigError(
            f"unknown run parameter {unknown[0]!r}; the parameters are: {', '.join(sorted(names))}"
        )
    # folders may come as pathlib.Path; the spec holds text (it is written to run.json)
    params = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in params.items()}
    return RunSpec(variant=variant, **params).validate().with_absolute_paths()


def run(
    variant: str | RunSpec | None = None,
    *,
    progress: bool = True,
    verbose: bool = False,
    label: str | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    **params: Any,
) -> RunResult:
    """Train and return a :class:`~.folder.RunResult` (losses, metrics, run folder).

    ``variant`` is a variant name with the spec's fields as keywords (``run("native",
    steps=10)``; None: the variant the preset implies, nki_moe for an MoE preset, else
    native), or a whole :class:`RunSpec`. One rank on a CPU or GPU trains in this
    process (runs/here.py); several ranks, several nodes, and any run on trn2 go through
    torchrun (runs/torchrun.py).
    """
    if isinstance(variant, RunSpec):
        if params:
            raise ConfigError(
                f"run(spec) takes no further run parameters ({', '.join(sorted(params))}); "
                "put them into the spec: spec.replace(...)"
            )
        spec = variant.validate().with_absolute_paths()
    else:
        spec = make_spec(variant, **params)
    from ..device import resolve_device
    from ..training.spec import plan_run
    from .weights import resolve_init

    spec = resolve_init(spec, resolve_device(spec.device), progress)
    plan = plan_run(spec)  # every input checked, once, before anything starts or is written
    check_memory(plan)
    options = dict(progress=progress, verbose=verbose, label=label, on_step=on_step)
    if not launches(spec, plan.device_type):
        from .here import run_here

        return run_here(plan, **options)
    from .torchrun import run_with_torchrun

    return run_with_torchrun(plan, **options)


def available_memory_gib() -> float | None:
    """This machine's free memory (Linux's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def check_memory(plan: Plan) -> None:
    """Refuse, with the numbers, a CPU run whose estimate exceeds the free memory.

    Without this a full-size preset on a laptop dies minutes later in an allocation
    error, or takes the machine into swap. (On trn2 planning checks each core's HBM.)
    """
    if plan.device_type == "neuron":
        warn_thin_slack(plan)
    if plan.device_type != "cpu" or plan.spec.skip_memory_check:
        return
    free = available_memory_gib()
    if free is None:
        return
    per_rank = plan.memory().total_gib
    ranks_here = plan.spec.nproc
    if per_rank * ranks_here > free:
        raise ConfigError(
            f"preset {plan.preset.name!r} needs about {per_rank * ranks_here:.1f} GiB on this "
            f"machine ({ranks_here} rank(s) x {per_rank:.1f} GiB: weights, gradients, AdamW "
            f"state, activations), more than the {free:.1f} GiB free; train a small preset "
            "(--preset tiny), or pass --skip-memory-check to try anyway"
        )


def warn_thin_slack(plan: Plan) -> None:
    """One ``warning:`` line on stderr when a trn2 plan leaves under 1 GiB per core."""
    import sys

    warning = plan.memory().slack_warning()
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)


def launches(spec: RunSpec, device_type: str) -> bool:
    """Whether a run goes through torchrun rather than training in this process.

    Several ranks always do; on trn2 one rank does too, so that the Neuron runtime
    starts (and keeps its NeuronCores) in a child, never in a long-lived notebook
    kernel. A process torchrun started trains in place.
    """
    from ..training.ranks import launched_by_torchrun

    return not launched_by_torchrun() and (spec.world > 1 or device_type == "neuron")
