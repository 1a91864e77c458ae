"""``qwen3-trn plan``: every layout of a model on N nodes, those that fit, fastest first.

A layout is what torchtitan's ParallelismConfig and the run's settings decide: tensor
parallel degree (inside a chip), FSDP inside a node, HSDP replicas or FSDP across nodes,
activation checkpointing and local batch, at a fixed global batch (gradient
accumulation makes up the rest). For a package preset on trn2 or this CPU each
candidate is a :class:`RunSpec` planned by the same ``plan_run`` a training run uses,
so its memory estimate is the one ``train`` checks (training/memory.py) and its command
trains exactly it; any other model (a config.json) or machine gets the same memory
model with the machine's HBM, and no command. Layouts over ``PLANNER_MARGIN`` of the
usable memory are dropped; the rest are ranked by the step-time model (ops/planner/cost.py),
HSDP first among ties.
"""

from __future__ import annotations

from ...errors import ConfigError
from ...training.memory import MemoryEstimate, estimate_memory
from ...training.spec import ACTIVATION_CHECKPOINTING, RunSpec
from .batch import batch_note, default_batch_tokens, lr_note, scaled_lr
from .cost import estimate_step
from .layout import Candidate, LayoutPlan, rank_candidates
from .machines import PLANNER_MARGIN, Machine, default_machine_key, get_machine
from .models import PlannedModel, load_model

LOCAL_BATCHES = (1, 2, 4, 8)
TP_DEGREES = (1, 2, 4, 8)

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


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ------------------------------------------------------------------------------ inputs


def check_nodes(nodes: object, machine: Machine) -> int:
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ConfigError(f"nodes must be a positive integer, got {nodes!r}")
    if machine.device.is_cpu and nodes != 1:
        raise ConfigError("a CPU plan is for this machine: --nnodes 1 (and --nproc N ranks)")
    if nodes > machine.max_nodes:
        raise ConfigError(
            f"--nnodes {nodes} is over the planner's limit of {machine.max_nodes} nodes "
            f"({machine.max_nodes * machine.ranks_per_node:,} ranks of {machine.key}): "
            "plan a real cluster's size"
        )
    if machine.nodes_per_domain > 1 and nodes % machine.nodes_per_domain:
        raise ConfigError(
            f"--nnodes {nodes} on {machine.key}: an UltraServer is {machine.nodes_per_domain} "
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
        from ...model.presets import get_preset

        return get_preset(model.preset).seq_len
    return min(model.shape.max_seq_len, 8192)


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
    from ...training.plan import plan_run

    plan = plan_run(spec.replace(skip_memory_check=True), device_type=machine.device)
    memory = plan.memory()
    limit = PLANNER_MARGIN * memory.usable_gib
    if free_gib is not None:  # a CPU's ranks share its free memory (what a CPU run may use)
        limit = PLANNER_MARGIN * free_gib / spec.nproc
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
        nodes=spec.nnodes,
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
    from ...model.presets import Layout

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
        limit_gib=PLANNER_MARGIN * memory.usable_gib,
        nodes=nodes,
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
    corpus: str | None = None,
) -> LayoutPlan:
    """Every layout of ``model`` on ``nodes`` nodes that fits, fastest first.

    ``machine``: a key of cost.MACHINES (default: trn2, or this CPU for ``device``
    "cpu": ``nproc`` ranks, its memory, its measured matmul peak). The global batch is
    held at ``global_batch_tokens`` (default: one node's, held as nodes grow: batch.py);
    a layout whose microbatch is smaller accumulates gradients, one whose microbatch is
    larger is left out (it would train another batch, and so another lr).
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
    trains_it = planned.preset is not None and (machine.device.is_trn2 or machine.device.is_cpu)
    excluded = [PP_EXCLUDED, CP_EXCLUDED]
    tps = [t for t in TP_DEGREES if t <= machine.ranks_per_chip]
    if machine.ranks_per_chip < max(TP_DEGREES):
        excluded.append(tp_excluded(machine))
    if shape.is_moe:
        tps = [1]
        excluded += [EP_EXCLUDED, MOE_TP_EXCLUDED]
    tps = [t for t in tps if shape.n_heads % t == 0 and shape.n_kv_heads % t == 0]
    batch = global_batch_tokens or default_batch_tokens(per_node, world, seq, tps)
    if batch % seq:
        raise ConfigError(
            f"--global-batch-tokens {batch} is not a whole number of {seq}-token sequences"
        )
    batches = (local_batch,) if local_batch else LOCAL_BATCHES
    free = None
    if machine.device.is_cpu:
        from ...runs.run import available_memory_gib

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
                            corpus=corpus,
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
        batch_note=batch_note(batch, per_node, seq, nodes, asked=bool(global_batch_tokens)),
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
    terms = closest.terms()
    largest = max(terms, key=lambda k: terms[k])
    text += (
        f": the smallest needs {closest.total_gib:.1f} GiB per rank, over the planner's "
        f"{PLANNER_MARGIN:.0%} of {closest.usable_gib:.1f} usable "
        f"({PLANNER_MARGIN * closest.usable_gib:.1f}), {terms[largest]:.1f} GiB of it {largest}"
    )
    unsharded = closest.total_gib - closest.sharded_state_gib  # what more nodes keep
    if largest == "FSDP buffers" and unsharded > PLANNER_MARGIN * closest.usable_gib:
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
    return text + "; plan more nodes (--nnodes), a shorter --seq-len, or a smaller model"


# ------------------------------------------------------------------------------ layout
