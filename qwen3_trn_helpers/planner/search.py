"""``qwen3-trn plan``: every layout of a model on N nodes, those that fit, fastest first.

A layout is what torchtitan's ParallelismConfig and the run's settings decide: tensor
parallel degree (inside a chip), FSDP inside a node, HSDP replicas or FSDP across nodes,
activation checkpointing and local batch, at a fixed global batch (gradient
accumulation makes up the rest). For a package preset on trn2 or this CPU each
candidate is a :class:`RunSpec` planned by the same ``plan_run`` a training run uses,
so its memory estimate is the one ``train`` checks (training/memory.py) and its command
trains exactly it; any other model (a config.json) or machine gets the same memory
model with the machine's HBM, and no command. Layouts over ``PLAN_HEADROOM`` of the
usable memory are dropped; the rest are ranked by the step-time model (planner/cost.py),
HSDP first among ties.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..training.memory import MemoryEstimate, estimate_memory
from ..training.spec import ACTIVATION_CHECKPOINTING, RunSpec
from ..trn2 import PLANNING_HEADROOM
from .cost import (
    PLAN_HEADROOM,
    Machine,
    StepEstimate,
    default_machine_key,
    estimate_step,
    get_machine,
)
from .models import PlannedModel, load_model

LOCAL_BATCHES = (1, 2, 4, 8)
TP_DEGREES = (1, 2, 4, 8)
#: two estimates closer than this are a tie: the model is not finer than that, and a tie
#: goes to HSDP (AWS's practice: FSDP on NeuronLink, replicas across EFA), then to less
#: memory
TIE = 0.01

#: Why no candidate has expert parallelism (read from the code, not assumed)
EP_EXCLUDED = (
    "EP excluded: torchtitan 0.3.0's expert parallelism shards the experts over ranks and "
    "moves tokens to them all-to-all in RoutedExperts' token dispatcher; this package's "
    "BlockwiseRoutedExperts (model/moe_blockwise.py, what nki_moe runs) replaces that "
    "forward, never calls the dispatcher and computes all E experts on each rank (EP 1), "
    "as the NKI kernel is built for"
)
MOE_TP_EXCLUDED = (
    "TP not enumerated for MoE: the blockwise experts compute on each expert weight's local "
    "tensor and have not been tested with TP-sharded experts (AWS's 30B-A3B recipe: FSDP only)"
)
PP_EXCLUDED = (
    "PP not modelled: this package's runs build torchtitan's model whole on every rank "
    "(no pipeline_parallel_degree in RunSpec), and every model it plans fits without "
    "pipeline stages; a pipeline's bubble and schedules are not in the cost model"
)
CP_EXCLUDED = (
    "CP not modelled: context parallelism (ring attention over sequence shards) pays off "
    "only past the sequence lengths these presets train (4,096-8,192), and torchtitan's CP "
    "needs SDPA's CUDA kernels, not the causal/NKI attention trn2 runs"
)


def tp_excluded(machine: Machine) -> str:
    return (
        f"TP above {machine.ranks_per_chip} (one chip's ranks): its per-block collectives "
        "stay inside a chip (Neuron docs, training best practices: keep TP4 within a chip)"
    )


@dataclass(frozen=True)
class Candidate:
    """One layout, with its memory and step estimates."""

    layout: str
    tp: int
    fsdp: int
    dp_replicate: int
    memory: MemoryEstimate
    estimate: StepEstimate
    world: int
    activation_checkpoint: str
    local_batch: int
    seq_len: int
    limit_gib: float  # what the planner lets a rank use (PLAN_HEADROOM of usable)
    spec: RunSpec | None = None  # the run that trains it (a preset on trn2 or this CPU)

    @property
    def fits(self) -> bool:
        return self.memory.total_gib <= self.limit_gib

    @property
    def microbatches(self) -> int:
        return self.estimate.microbatches

    @property
    def tokens_per_s(self) -> float:
        """Estimated tokens per second of the whole job."""
        return self.estimate.tokens_per_s_per_rank * self.world

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: local batch x data-parallel ranks x microbatches."""
        return self.local_batch * self.world // self.tp * self.microbatches

    def label(self) -> str:
        accumulate = f", {self.microbatches} microbatches" if self.microbatches > 1 else ""
        return (
            f"{self.layout}, AC {self.activation_checkpoint}, local batch "
            f"{self.local_batch}{accumulate}"
        )

    def row(self, rank: int) -> dict[str, Any]:
        return {
            "#": rank,
            "layout": self.layout,
            "AC": self.activation_checkpoint,
            "local batch": self.local_batch,
            "micro- batches": self.microbatches,
            "global batch": self.global_batch,
            "GiB/rank": round(self.memory.total_gib, 1),
            **self.estimate.row(),
            "tokens/s/rank": round(self.estimate.tokens_per_s_per_rank),
            "tokens/s": round(self.tokens_per_s),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "tp": self.tp,
            "fsdp": self.fsdp,
            "dp_replicate": self.dp_replicate,
            "cp": 1,
            "pp": 1,
            "ep": 1,
            "activation_checkpoint": self.activation_checkpoint,
            "local_batch": self.local_batch,
            "microbatches": self.microbatches,
            "global_batch": self.global_batch,
            "global_batch_tokens": self.global_batch * self.seq_len,
            "memory_gib_per_rank": self.memory.total_gib,
            "memory_limit_gib": self.limit_gib,
            "fits": self.fits,
            "memory": self.memory.row(),
            "estimate": self.estimate.to_json(),
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_rank": self.estimate.tokens_per_s_per_rank,
            "argv": self.spec.to_argv() if self.spec else None,
        }


@dataclass
class LayoutPlan:
    """The planner's answer: the ranked candidates and what was left out, and why."""

    model: PlannedModel
    nodes: int
    seq_len: int
    machine: Machine
    compiled: bool
    global_batch_tokens: int
    candidates: list[Candidate]  # fitting, fastest first
    rejected: int  # layouts over the memory limit
    considered: int
    larger_batch: int = 0  # layouts whose one microbatch is already over the global batch
    excluded: list[str] = field(default_factory=list)
    lr_note: str = ""
    free_gib: float | None = None  # a CPU plan: this machine's free memory

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    @property
    def ranks(self) -> int:
        return self.nodes * self.machine.ranks_per_node

    def command(self, candidate: Candidate | None = None) -> str:
        """The command that trains ``candidate`` (the best): train on one node, a Slurm
        script for several; none for a model or machine this package does not train."""
        import shlex

        c = candidate or self.best
        if c.spec is None:
            return (
                "(no command: this package trains its Qwen3 presets on trn2 or a CPU; "
                f"{self.model.name} on {self.machine.key} is an estimate only)"
            )
        verb = "train" if self.nodes == 1 or not self.machine.device.is_trn2 else "slurm"
        argv = c.spec.to_argv()
        if verb == "slurm" and "--steps" not in argv:  # a job file states its length
            argv = ["--steps", str(c.spec.steps), *argv]
        return shlex.join(["qwen3-trn", verb, *argv])

    def runner_up_reason(self) -> str:
        """Why the second candidate lost, term by term."""
        if len(self.candidates) < 2:
            return "no runner-up: only one layout fits"
        return "runner-up " + why_slower(self.candidates[0], self.candidates[1])

    def fit_text(self, c: Candidate) -> str:
        """How it fits: of the HBM a plan may use, or of this CPU's free memory."""
        if self.free_gib is not None:
            return (
                f"{c.memory.total_gib:.1f} GiB per rank x {c.world} of this machine's "
                f"{self.free_gib:.1f} GiB free; a plan may use {PLAN_HEADROOM:.0%} of "
                f"{PLANNING_HEADROOM:.0%}"
            )
        return (
            f"{c.memory.total_gib:.1f} GiB per rank, limit {c.limit_gib:.1f} "
            f"({PLAN_HEADROOM:.0%} of the {c.memory.usable_gib:.1f} usable)"
        )

    def header(self) -> str:
        calibrated = (
            f"; efficiency measured on this machine ({self.machine.calibrated})"
            if self.machine.calibrated
            else ""
        )
        return (
            f"{self.model.describe()} on {self.nodes} x {self.machine.name} = {self.ranks} "
            f"ranks ({self.nodes} nodes x {self.machine.ranks_per_node}), seq {self.seq_len}, "
            f"global batch {self.global_batch_tokens:,} tokens, "
            f"{'compiled' if self.compiled else 'eager'}{calibrated}: {self.considered} "
            f"layouts, {self.rejected} over {PLAN_HEADROOM:.0%} of usable memory, "
            f"{self.larger_batch} over the global batch, {len(self.candidates)} fit"
        )

    def rows(self, top: int) -> list[dict[str, Any]]:
        return [c.row(i + 1) for i, c in enumerate(self.candidates[:top])]

    def to_json(self, top: int) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "preset": self.model.preset,
            "parameters": self.model.parameters,
            "active_parameters": self.model.active_parameters,
            "nodes": self.nodes,
            "ranks_per_node": self.machine.ranks_per_node,
            "ranks": self.ranks,
            "seq_len": self.seq_len,
            "global_batch_tokens": self.global_batch_tokens,
            "compiled": self.compiled,
            "machine": self.machine.name,
            "calibration": self.machine.calibrated,
            "constants": self.machine.constants(),
            "considered": self.considered,
            "rejected_memory": self.rejected,
            "rejected_batch": self.larger_batch,
            "excluded": self.excluded,
            "lr": self.lr_note,
            "candidates": [c.to_json() for c in self.candidates[:top]],
            "command": self.command(),
            "runner_up": self.runner_up_reason(),
        }

    def render(self, top: int) -> str:
        from ..tables import Table

        lines = [
            self.header(),
            "",
            str(Table(self.rows(top))),
            "",
            "cost-model constants:",
            str(Table(self.machine.constants())),
            "",
            *[f"not considered: {why}" for why in self.excluded],
            f"best: {self.best.label()} ({self.fit_text(self.best)})",
            f"why not the runner-up: {self.runner_up_reason()}",
            *([f"lr: {self.lr_note}"] if self.lr_note else []),
            "",
            self.command(),
        ]
        return "\n".join(lines)


def _per_k_tokens(c: Candidate) -> dict[str, float]:
    """Milliseconds per 1,000 of a rank's tokens, by term of the step estimate."""
    e = c.estimate
    k = 1000 / (e.tokens_per_rank / e.tp)
    return {
        "compute": 1e3 * e.compute_s * k,
        "recompute": 1e3 * e.recompute_s * k,
        "exposed FSDP/HSDP": 1e3 * e.exposed_s * k,
        "TP collectives": 1e3 * e.tp_s * k,
    }


def ties(a: Candidate, b: Candidate) -> bool:
    return abs(a.tokens_per_s - b.tokens_per_s) <= TIE * max(a.tokens_per_s, b.tokens_per_s)


def why_slower(a: Candidate, b: Candidate) -> str:
    """One sentence: why ``b`` ranks below ``a`` (the term that grew most, or the tie rule)."""
    ta, tb = _per_k_tokens(a), _per_k_tokens(b)
    if ties(a, b):
        if a.dp_replicate > b.dp_replicate:
            rule = "HSDP goes first (replicas across nodes, FSDP inside)"
        else:
            rule = (
                f"it needs more memory ({b.memory.total_gib:.1f} vs "
                f"{a.memory.total_gib:.1f} GiB per rank)"
            )
        return (
            f"({b.label()}) ties on the estimate (within {TIE:.0%}, finer than the model "
            f"can tell); {rule}"
        )
    worst = max(ta, key=lambda t: tb[t] - ta[t])
    slower = 100 * (1 - b.tokens_per_s / a.tokens_per_s)
    return (
        f"({b.label()}) is {slower:.0f}% slower: per 1,000 tokens of a rank it spends "
        f"{tb[worst]:.2f} ms on {worst} against {ta[worst]:.2f} ms ("
        + ", ".join(f"{t} {tb[t]:.2f} vs {ta[t]:.2f}" for t in ta)
        + " ms)"
    )


def rank_candidates(candidates: list[Candidate]) -> list[Candidate]:
    """Fastest first; among ties (within :data:`TIE` of the fastest of their group) more
    HSDP replicas first, then less memory."""
    by_speed = sorted(candidates, key=lambda c: -c.tokens_per_s)
    ranked: list[Candidate] = []
    while by_speed:
        lead = by_speed[0]
        group = [c for c in by_speed if ties(lead, c)]
        group.sort(key=lambda c: (-c.dp_replicate, c.memory.total_gib, -c.tokens_per_s))
        ranked += group
        by_speed = [c for c in by_speed if c not in group]
    return ranked


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ------------------------------------------------------------------------------ inputs


def check_nodes(nodes: object, machine: Machine) -> int:
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ConfigError(f"nodes must be a positive integer, got {nodes!r}")
    if machine.device.is_cpu and nodes != 1:
        raise ConfigError("a CPU plan is for this machine: --nodes 1 (and --nproc N ranks)")
    if nodes > machine.max_nodes:
        raise ConfigError(
            f"--nodes {nodes} is over the planner's limit of {machine.max_nodes} nodes "
            f"({machine.max_nodes * machine.ranks_per_node:,} ranks of {machine.key}): "
            "plan a real cluster's size"
        )
    if machine.nodes_per_domain > 1 and nodes % machine.nodes_per_domain:
        raise ConfigError(
            f"--nodes {nodes} on {machine.key}: an UltraServer is {machine.nodes_per_domain} "
            f"instances; give a multiple of {machine.nodes_per_domain}"
        )
    return nodes


def check_seq_len(seq_len: int, model: PlannedModel) -> int:
    if seq_len > model.shape.max_seq_len:
        raise ConfigError(
            f"--seq-len {seq_len} is over {model.name}'s {model.shape.max_seq_len} positions "
            "(max_position_embeddings): a shorter --seq-len"
        )
    return seq_len


def default_seq_len(model: PlannedModel) -> int:
    if model.preset:
        from ..model.presets import get_preset

        return get_preset(model.preset).seq_len
    return min(model.shape.max_seq_len, 8192)


def recipe_batch_tokens(model: PlannedModel) -> int | None:
    """The batch a preset's lr was set for: its recipe's layout on one node."""
    if not model.preset:
        return None
    from ..model.presets import get_preset

    preset = get_preset(model.preset)
    return preset.world_size // max(preset.layout.tp, 1) * preset.seq_len


def scaled_lr(model: PlannedModel, global_batch_tokens: int) -> float | None:
    """The preset's lr for this batch: AdamW's lr scales with the square root of the
    batch (Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive Gradient
    Algorithms", NeurIPS: the square-root scaling rule), from the recipe's lr at the
    recipe's batch. None for a model without a recipe, or at the recipe's batch."""
    reference = recipe_batch_tokens(model)
    if reference is None or global_batch_tokens == reference:
        return None
    from ..model.presets import get_preset

    return float(f"{get_preset(model.preset).lr * math.sqrt(global_batch_tokens / reference):.3g}")


def lr_note(model: PlannedModel, global_batch_tokens: int) -> str:
    """The learning-rate rule, in words, when the batch is not the recipe's."""
    reference = recipe_batch_tokens(model)
    lr = scaled_lr(model, global_batch_tokens)
    if reference is None or lr is None:
        return ""
    from ..model.presets import get_preset

    return (
        f"{lr:g} (in the command): the recipe's {get_preset(model.preset).lr:g} at its "
        f"{reference:,}-token batch x sqrt({global_batch_tokens / reference:.3g}) for this "
        "batch (square-root rule for Adam, Malladi et al. 2022); a short run confirms it"
    )


# ---------------------------------------------------------------------------- evaluate


def evaluate(
    spec: RunSpec,
    machine: Machine,
    *,
    free_gib: float | None = None,
    compiled: bool = False,
    microbatches: int = 1,
) -> Candidate:
    """``spec`` (a preset on trn2 or this CPU) planned for ``machine``, fitting or not
    (``Candidate.fits``: within the planner's headroom).

    Planned by ``plan_run`` for the target machine as a run there is (no files read),
    without its refusal, so that a layout over the limit still has its numbers.
    """
    from ..training.plan import plan_run

    plan = plan_run(spec.replace(skip_memory_check=True), device_type=machine.device)
    memory = plan.memory()
    limit = PLAN_HEADROOM * memory.usable_gib
    if free_gib is not None:  # a CPU's ranks share its free memory
        limit = PLAN_HEADROOM * PLANNING_HEADROOM * free_gib / spec.nproc
    estimate = estimate_step(
        plan.shape,
        machine,
        nnodes=spec.nnodes,
        tp=plan.tp,
        dp_replicate=plan.dp_replicate,
        activation_checkpoint=plan.activation_checkpoint,
        local_batch=spec.local_batch_size,
        seq_len=plan.seq_len,
        reduce_bytes=2 if plan.reduce_dtype == "bfloat16" else 4,
        microbatches=microbatches,
        compiled=compiled,
        moe_block_size=plan.moe_block_size,
    )
    candidate = Candidate(
        layout=str(plan.layout),
        tp=plan.tp,
        fsdp=plan.fsdp,
        dp_replicate=plan.dp_replicate,
        memory=memory,
        estimate=estimate,
        world=spec.world,
        activation_checkpoint=plan.activation_checkpoint,
        local_batch=spec.local_batch_size,
        seq_len=plan.seq_len,
        limit_gib=limit,
        spec=spec,
    )
    return candidate


def evaluate_layout(
    model: PlannedModel,
    machine: Machine,
    *,
    nodes: int,
    tp: int,
    dp_replicate: int,
    activation_checkpoint: str,
    local_batch: int,
    seq_len: int,
    microbatches: int = 1,
    compiled: bool = False,
    reduce_bytes: int = 4,
) -> Candidate:
    """Any model's layout on any machine: the memory model at the machine's HBM (torch's
    defaults: fp32 gradient reduction, one loss chunk, fused attention) and the cost model."""
    from ..model.presets import Layout

    world = nodes * machine.ranks_per_node
    memory = estimate_memory(
        model.shape,
        world=world // dp_replicate,
        tp=tp,
        seq_len=seq_len,
        local_batch=local_batch,
        activation_checkpoint=activation_checkpoint,
        reduce_bytes=reduce_bytes,
        runtime_gib=machine.runtime_gib,
        hbm_gib=machine.hbm_gib,
    )
    estimate = estimate_step(
        model.shape,
        machine,
        nnodes=nodes,
        tp=tp,
        dp_replicate=dp_replicate,
        activation_checkpoint=activation_checkpoint,
        local_batch=local_batch,
        seq_len=seq_len,
        reduce_bytes=reduce_bytes,
        microbatches=microbatches,
        compiled=compiled,
    )
    layout = Layout(tp=tp, fsdp=world // (tp * dp_replicate), dp_replicate=dp_replicate)
    return Candidate(
        layout=layout.describe(world),
        tp=tp,
        fsdp=world // (tp * dp_replicate),
        dp_replicate=dp_replicate,
        memory=memory,
        estimate=estimate,
        world=world,
        activation_checkpoint=activation_checkpoint,
        local_batch=local_batch,
        seq_len=seq_len,
        limit_gib=PLAN_HEADROOM * memory.usable_gib,
    )


# ------------------------------------------------------------------------------ search


def plan_layouts(
    model: str | PlannedModel,
    nodes: int = 1,
    *,
    seq_len: int | None = None,
    local_batch: int | None = None,
    device: str = "neuron",
    nproc: int | None = None,
    machine: Machine | str | None = None,
    out: str | None = None,
    compiled: bool = False,
    global_batch_tokens: int | None = None,
) -> LayoutPlan:
    """Every layout of ``model`` on ``nodes`` nodes that fits, fastest first.

    ``machine``: a key of cost.MACHINES (default: trn2, or this CPU for ``device``
    "cpu": ``nproc`` ranks, its memory, its measured matmul peak). The global batch is
    held at ``global_batch_tokens`` (default: one sequence per rank); a layout whose
    microbatch is smaller accumulates gradients, one whose microbatch is larger is left
    out (it would train another batch, and so another lr).
    """
    planned = model if isinstance(model, PlannedModel) else load_model(model)
    if machine is None or isinstance(machine, str):
        key = machine or default_machine_key(device)
        machine = get_machine(key, nproc=nproc)
    nodes = check_nodes(nodes, machine)
    per_node = machine.ranks_per_node
    seq = check_seq_len(seq_len or default_seq_len(planned), planned)
    shape = planned.shape
    world = nodes * per_node
    batch = global_batch_tokens or world * seq
    if batch % seq:
        raise ConfigError(
            f"--global-batch-tokens {batch} is not a whole number of {seq}-token sequences"
        )
    trains_it = planned.preset is not None and (machine.device.is_trn2 or machine.device.is_cpu)
    excluded = [PP_EXCLUDED, CP_EXCLUDED]
    tps = [t for t in TP_DEGREES if t <= machine.ranks_per_chip]
    if machine.ranks_per_chip < max(TP_DEGREES):
        excluded.append(tp_excluded(machine))
    if shape.is_moe:
        tps = [1]
        excluded += [EP_EXCLUDED, MOE_TP_EXCLUDED]
    tps = [t for t in tps if shape.n_heads % t == 0 and shape.n_kv_heads % t == 0]
    batches = (local_batch,) if local_batch else LOCAL_BATCHES
    free = None
    if machine.device.is_cpu:
        from ..runs.run import available_memory_gib

        free = available_memory_gib()
    out = out or f"runs/{planned.preset or 'plan'}-{nodes}n"
    candidates, rejected, considered, larger = [], 0, 0, 0
    closest: MemoryEstimate | None = None  # the smallest of those that do not fit
    replica_counts = _divisors(nodes) if not machine.device.is_cpu else [1]
    for tp in tps:
        for replicas in replica_counts:
            if (world // replicas) % tp:
                continue
            for ac in ACTIVATION_CHECKPOINTING:
                for lb in batches:
                    considered += 1
                    per_microbatch = lb * (world // tp) * seq
                    if per_microbatch > batch or batch % per_microbatch:
                        larger += 1
                        continue
                    micro = batch // per_microbatch
                    if trains_it:
                        spec = RunSpec(
                            preset=planned.preset,
                            nproc=per_node,
                            nnodes=nodes,
                            tp=tp,
                            dp_replicate=replicas,
                            activation_checkpoint=ac,
                            local_batch_size=lb,
                            global_batch_size=(batch // seq) if micro > 1 else None,
                            lr=scaled_lr(planned, batch),
                            seq_len=seq,
                            device=machine.device_type,
                            out=out,
                        ).validate()
                        candidate = evaluate(
                            spec, machine, free_gib=free, compiled=compiled, microbatches=micro
                        )
                    else:
                        candidate = evaluate_layout(planned, machine, nodes=nodes, tp=tp,
                                                    dp_replicate=replicas,
                                                    activation_checkpoint=ac, local_batch=lb,
                                                    seq_len=seq, microbatches=micro,
                                                    compiled=compiled)  # fmt: skip
                    if not candidate.fits:
                        rejected += 1
                        memory = candidate.memory
                        if closest is None or memory.total_gib < closest.total_gib:
                            closest = memory
                    else:
                        candidates.append(candidate)
    if not candidates:
        raise ConfigError(
            no_fit_message(planned.name, nodes, seq, considered, closest, excluded, larger)
        )
    return LayoutPlan(
        model=planned,
        nodes=nodes,
        seq_len=seq,
        machine=machine,
        compiled=compiled,
        global_batch_tokens=batch,
        candidates=rank_candidates(candidates),
        rejected=rejected,
        considered=considered,
        larger_batch=larger,
        excluded=excluded,
        lr_note=lr_note(planned, batch),
        free_gib=free,
    )


def no_fit_message(
    name: str,
    nodes: int,
    seq: int,
    considered: int,
    closest: MemoryEstimate | None,
    excluded: list[str],
    larger: int = 0,
) -> str:
    """Why nothing fits: the smallest layout's total and its largest term, and whether more
    nodes would help (sharded state shrinks with ranks; a gathered block does not)."""
    text = f"no layout of {name} fits {nodes} node(s) at seq_len {seq} ({considered} tried"
    text += f", {larger} over the global batch)" if larger else ")"
    if closest is None:
        return text + "; a larger --global-batch-tokens admits larger microbatches"
    terms = {k: v for k, v in closest.row().items() if k not in _TOTALS}
    largest = max(terms, key=lambda k: terms[k])
    text += (
        f": the smallest needs {closest.total_gib:.1f} GiB per rank, over the planner's "
        f"{PLAN_HEADROOM:.0%} of {closest.usable_gib:.1f} usable "
        f"({PLAN_HEADROOM * closest.usable_gib:.1f}), {terms[largest]:.1f} GiB of it {largest}"
    )
    unsharded = closest.total_gib - closest.sharded_state_gib  # what more nodes keep
    if largest == "FSDP buffers" and unsharded > PLAN_HEADROOM * closest.usable_gib:
        text += (
            " (one block gathered in bf16, the next prefetched, and its gradients: it does "
            "not shrink with more nodes)"
        )
        if any(e.startswith("EP excluded") for e in excluded):
            text += (
                "; a model this size needs expert or tensor parallelism over its experts, "
                "which this package's blockwise experts do not support yet (they compute "
                "every expert on each rank: model/moe_blockwise.py)"
            )
        return text
    return text + "; plan more nodes (--nodes), a shorter --seq-len, or a smaller model"


_TOTALS = ("total GiB", "usable GiB (90%)", "HBM GiB")


# ------------------------------------------------------------------------------ layout


LAYOUT_KEYS = ("fsdp", "tp", "dp_replicate", "cp", "pp", "ep", "ac", "local_batch")


def parse_layout(text: str) -> dict[str, Any]:
    """``fsdp=8,tp=1,ac=selective,local_batch=2`` -> its values (missing: defaults)."""
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in LAYOUT_KEYS:
            raise ConfigError(
                f"--layout {part!r}: give KEY=VALUE pairs, KEY one of {', '.join(LAYOUT_KEYS)}"
            )
        if key == "ac":
            if value not in ACTIVATION_CHECKPOINTING:
                choices = "|".join(ACTIVATION_CHECKPOINTING)
                raise ConfigError(f"--layout ac={value!r}: one of {choices}")
            values[key] = value
            continue
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"--layout {key}={value!r}: a positive integer")
        values[key] = int(value)
    return values


def plan_given_layout(
    model: str | PlannedModel,
    layout: str,
    *,
    nodes: int = 1,
    machine: Machine | str = "trn2",
    seq_len: int | None = None,
    compiled: bool = False,
    global_batch_tokens: int | None = None,
    nproc: int | None = None,
) -> tuple[PlannedModel, Machine, Candidate]:
    """One given layout evaluated (``--layout``), fitting or not: the backtest's entry."""
    planned = model if isinstance(model, PlannedModel) else load_model(model)
    if isinstance(machine, str):
        machine = get_machine(machine, nproc=nproc)
    nodes = check_nodes(nodes, machine)
    values = parse_layout(layout)
    for key, why in (("pp", PP_EXCLUDED), ("cp", CP_EXCLUDED), ("ep", EP_EXCLUDED)):
        if values.get(key, 1) > 1:
            raise ConfigError(f"--layout {key}={values[key]}: {why}")
    world = nodes * machine.ranks_per_node
    tp, replicas = values.get("tp", 1), values.get("dp_replicate", 1)
    if tp > machine.ranks_per_chip:
        raise ConfigError(f"--layout tp={tp}: {tp_excluded(machine)}")
    fsdp = values.get("fsdp", world // (tp * replicas))
    if tp * replicas * fsdp != world:
        raise ConfigError(
            f"--layout: tp {tp} x dp_replicate {replicas} x fsdp {fsdp} = "
            f"{tp * replicas * fsdp} ranks, but {nodes} node(s) of {machine.key} have "
            f"{world}: make the product {world}"
        )
    seq = check_seq_len(seq_len or default_seq_len(planned), planned)
    lb = values.get("local_batch", 1)
    micro = 1
    if global_batch_tokens:
        per_microbatch = lb * (world // tp) * seq
        if global_batch_tokens % per_microbatch:
            raise ConfigError(
                f"--global-batch-tokens {global_batch_tokens} is not a multiple of this "
                f"layout's microbatch ({per_microbatch} tokens)"
            )
        micro = global_batch_tokens // per_microbatch
    ac = values.get("ac", "selective")
    if planned.preset is not None and (machine.device.is_trn2 or machine.device.is_cpu):
        spec = RunSpec(
            preset=planned.preset, nproc=machine.ranks_per_node, nnodes=nodes, tp=tp,
            dp_replicate=replicas, activation_checkpoint=ac, local_batch_size=lb,
            global_batch_size=(global_batch_tokens // seq) if micro > 1 else None,
            seq_len=seq, device=machine.device_type, out=f"runs/{planned.preset}-{nodes}n",
        ).validate()  # fmt: skip
        return planned, machine, evaluate(spec, machine, compiled=compiled, microbatches=micro)
    candidate = evaluate_layout(
        planned, machine, nodes=nodes, tp=tp, dp_replicate=replicas, activation_checkpoint=ac,
        local_batch=lb, seq_len=seq, microbatches=micro, compiled=compiled,
    )  # fmt: skip
    return planned, machine, candidate
