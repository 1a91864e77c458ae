"""A cluster job's run, planned here for the nodes it will run on, then written out.

``qwen3-trn slurm`` and ``qwen3-trn k8s`` plan the run as every node will see it
(preset, layout, memory: the same ``plan_run``), refuse what would fail there, and hand
the :class:`JobPlan` to the schedulers' writers (ops/jobs/). The command line
only parses and prints.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ...training.plan import Plan, on_trn2, plan_run
from ...training.spec import RunSpec
from .saves import SaveRequest, Saves


@dataclass(frozen=True)
class JobPlan:
    """What a job file runs: the plan its nodes run, and the flags the file writes."""

    plan: Plan  # as the nodes will run it, checked here
    spec: RunSpec  # each node's ``qwen3-trn train`` flags (k8s: the pods' paths, as given)
    saves: Saves | None = None  # how its saves were sized (None: as the spec gave them)

    @property
    def on_trn2(self) -> bool:
        return self.plan.device.is_trn2


def refuse_no_steps(steps: int | None, command: str) -> None:
    """A job file states its length: no silent default of a few steps on a cluster."""
    if steps is None:
        raise ConfigError(
            f"a job file needs --steps N (how long the job trains); e.g. qwen3-trn "
            f"{command} --steps 1000 ..."
        )


def plan_job(
    spec: RunSpec, *, command: str, allow_hub_corpus: bool, pod_paths: bool = False,
    saves: SaveRequest | None = None,
) -> JobPlan:  # fmt: skip
    """The job ``spec`` describes, planned for the nodes it will run on (checks included).

    ``pod_paths``: the paths name files in the job's pods (k8s), not on this machine:
    they must be absolute, and are not looked for here (a Slurm script is written on
    the cluster, whose files are checked here and again on each node). ``command``
    names the verb in the one-line error a job without ``--steps`` gets. ``saves``:
    what the command line said about the saves; each default it left is sized to the
    job (ops/jobs/saves.py) and a problem with them is one warning line on stderr.
    """
    from ...device import device_elsewhere
    from .common import refuse_control_characters
    from .kubernetes import pod_path_free

    refuse_no_steps(spec.steps, command)
    # before anything reads a file: a newline in a path must not reach an error line
    # or a job file
    refuse_control_characters(spec, {"the working folder": os.getcwd()})
    planned = pod_path_free(spec) if pod_paths else spec
    device = device_elsewhere(spec.device)
    if device.is_trn2 and spec.nproc == 1:  # a trn2 node's ranks: one per NeuronCore
        spec = spec.replace(nproc=on_trn2(spec).nproc)
        planned = planned.replace(nproc=spec.nproc)
    # every input checked as the nodes will see it (preset, layout, memory), here
    plan = plan_run(planned, device_type=device)
    if plan.corpus_streams and spec.nnodes > 1 and not allow_hub_corpus:
        raise ConfigError(
            f"corpus {plan.corpus!r} streams from the Hugging Face hub on every rank of "
            f"{spec.nnodes} nodes (compute subnets often have no internet); prepare it once "
            f"on shared storage with 'qwen3-trn data prepare --corpus {plan.corpus} --out "
            "DIR --max-tokens N' and pass --corpus DIR, or pass --allow-hub-corpus"
        )
    if device.is_trn2:
        from ...runs.run import warn_thin_slack

        warn_thin_slack(plan)
    if saves is None:
        return JobPlan(plan, spec)
    sized = job_saves(plan, spec, saves, visible=not pod_paths)
    for line in sized.warnings():
        print(line, file=sys.stderr)
    spec = spec.replace(checkpoint_interval=sized.interval, keep_checkpoints=sized.keep,
                        checkpoint_async=sized.mode)  # fmt: skip
    return JobPlan(plan, spec, sized)


def job_saves(plan: Plan, spec: RunSpec, asked: SaveRequest, *, visible: bool) -> Saves:
    """``spec``'s saves, what ``asked`` left sized to the job (ops/jobs/saves.py)."""
    from .saves import size_saves, storage_for

    out = spec.out or ""
    storage = storage_for(out, write_mb_s=asked.write_mb_s, free_gb=asked.free_gb,
                          visible=visible)  # fmt: skip
    return size_saves(
        plan.shape.parameter_count(), storage, nodes=spec.nnodes,
        step=job_step_s(plan, out, visible=visible), interval=asked.interval,
        keep=asked.keep, mode=asked.mode, node_mtbf_h=asked.node_mtbf_h,
    )  # fmt: skip


def slurm_job(job: JobPlan, **options: Any) -> str:
    """The Slurm batch script of a planned job (``options``: ``slurm_script``'s)."""
    from .slurm import slurm_script

    return slurm_script(job.spec, on_trn2=job.on_trn2, saves=job.saves, **options)


def k8s_job(job: JobPlan, *, api: str, **options: Any) -> list[dict]:
    """The Kubernetes documents of a planned job: a PyTorchJob (``api="pytorchjob"``),
    else a TrainingRuntime and its TrainJob (``options``: the writers')."""
    from .kubernetes import pytorchjob_manifest, trainjob_manifests

    hyperpod = options.pop("hyperpod", False)
    if hyperpod and api != "pytorchjob":
        raise ConfigError(
            "--hyperpod writes a PyTorchJob (HyperPod's auto-resume takes over the v1 "
            "training operator's jobs): add --api pytorchjob"
        )
    if api == "pytorchjob":
        return [pytorchjob_manifest(job.spec, on_trn2=job.on_trn2, hyperpod=hyperpod, **options)]
    return trainjob_manifests(job.spec, on_trn2=job.on_trn2, **options)


def job_step_s(plan, out: str, *, visible: bool) -> tuple[float, str] | None:
    """A job's step time: measured in its run folder, else the planner's estimate for
    its layout on trn2 (its calibration, if ``plan --measure`` wrote one); None on a CPU."""
    from .saves import measured_step_s

    if visible and (measured := measured_step_s(out)) is not None:
        return measured[0], f"measured: the median of this run's {measured[1]} steps"
    if not plan.device.is_trn2:
        return None
    from ..planner.machines import get_machine
    from ..planner.search import evaluate

    spec = plan.spec
    micro = 1
    if spec.global_batch_size:  # gradient accumulation: whole microbatches per step
        micro = spec.global_batch_size // (spec.local_batch_size * plan.world_size // plan.tp)
    machine = get_machine("trn2")
    step = evaluate(spec, machine, microbatches=micro).estimate.step_s
    return step, f"the planner's estimate ({machine.efficiency_source.split(':')[0]} efficiency)"
