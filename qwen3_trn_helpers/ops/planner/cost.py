"""The planner's cost model: machines, collectives and a step's time, every constant cited.

One rank's optimizer step is ``microbatches`` forward-backward passes (gradient
accumulation holds the global batch fixed) of a transformer whose blocks FSDP2 gathers
and reduces one at a time, as torchtitan schedules them:

    microstep = exposed (the root and first block's all-gather, the last block's and the
                root's gradient reduction)
              + sum over blocks of  max(forward compute,  next block's all-gather)
                                  + max(backward compute + recompute,
                                        previous block's all-gather + this block's
                                        reduce-scatter (+ HSDP all-reduce))
              + TP collectives (between the matmuls that need them: nothing hides them)

FSDP2 prefetches the next block's parameters while a block computes (forward and
backward) and reduces a block's gradients while the next one's backward runs (torch's
``fully_shard``, the implicit prefetching torchtitan relies on); the collectives of one
window share one link, so they add. HSDP's all-reduce across replicas runs right after
the reduce-scatter in the same stream (FSDP2 ``HSDP``). With gradient accumulation every
microbatch gathers and reduces again: torchtitan 0.3.0's ``Trainer.train_step``
(trainer.py, the loop over ``gradient_accumulation_steps``) runs one forward and
backward per microbatch with FSDP2's gradient sync left on.

Each collective is an alpha-beta cost (Hockney 1994): ``steps x latency + bytes /
bandwidth``. A ring over n ranks takes n - 1 steps for an all-gather or reduce-scatter
and moves (n - 1) / n of the tensor per rank; an all-reduce is a reduce-scatter and an
all-gather, or a tree (2 log2 n steps), whichever is faster, as NCCL's tuner picks
(src/graph/tuning.cc). A ring's steps are synchronous, so one that crosses nodes pays the
network's latency on every step. Across nodes the node's network link carries every
rank's share.

Compute is torchtitan's MFU count (6 FLOPs per active parameter and token, the input
embedding excluded, + 12 L H Dh S for attention) at the machine's peak times its
efficiency. The efficiency is the one fitted number per machine and mode (eager,
compiled): fitted on a published run (``tests/ops/planner/backtest.py`` says which), measured by
``plan --measure`` (a calibration file, which then wins), or stated as assumed. MoE
experts computed by the blockwise kernel (nki_moe) are counted with their padding: a
rank's T x top-k token-expert pairs take ``num_blocks`` x block size slots
(model/moe_blockwise.num_blocks), about 2x at Qwen3-30B-A3B, local batch 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...model.shapes import Qwen3Shape, active_parameter_count
from .machines import Link, Machine

#: Extra compute of activation checkpointing, as a share of the step's 6 FLOPs per
#: parameter and token (forward 2, backward 4; Narayanan et al. 2021, "Efficient
#: Large-Scale Language Model Training on GPU Clusters", sec. 3.5): full recomputes the
#: whole forward (+2/6); torchtitan's selective (op) policy saves every other matmul's
#: output (torchtitan/distributed/activation_checkpoint.py, ``mm_count % 2``), so it
#: recomputes about half the forward's matmuls (+1/6).
RECOMPUTE = {"none": 0.0, "selective": 1 / 6, "full": 2 / 6}
#: The forward's share of a block's compute (2 of 6 FLOPs per parameter and token)
FORWARD_SHARE = 2 / 6
#: TP collectives per transformer block and step, with sequence parallelism: an
#: all-gather before attention and before the MLP, a reduce-scatter after each, forward
#: and backward (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
#: Transformer Models", sec. 4.2.2); full checkpointing repeats the forward's four;
#: torchtitan's selective policy saves the reduce-scatters' outputs and repeats the
#: all-gathers.
TP_COLLECTIVES = {"none": 8, "selective": 10, "full": 12}


# ---------------------------------------------------------------------------- machines


# ------------------------------------------------------------------------- calibration


# ------------------------------------------------------------------------- collectives


def ring_collective(n: int, nbytes: float, link: Link, passes: int = 1) -> float:
    """Seconds of a ring all-gather or reduce-scatter (``passes`` 2: an all-reduce) of a
    tensor of ``nbytes`` (the whole, gathered) over ``n`` ranks on ``link``."""
    if n <= 1:
        return 0.0
    steps = passes * (n - 1)
    return steps * link.latency_us * 1e-6 + passes * (n - 1) / n * nbytes / (link.gb_s * 1e9)


def all_reduce(n: int, nbytes: float, link: Link) -> float:
    """Ring (2 (n-1) steps) or tree (2 log2 n steps, the same bytes), the faster, as NCCL
    picks (double binary trees move each byte up and down once per rank)."""
    if n <= 1:
        return 0.0
    ring = ring_collective(n, nbytes, link, passes=2)
    tree = 2 * math.ceil(math.log2(n)) * link.latency_us * 1e-6 + 2 * nbytes / (link.gb_s * 1e9)
    return min(ring, tree)


def group_collective(
    machine: Machine, n: int, nbytes: float, ranks_per_domain: int, passes: int = 1
) -> float:
    """A ring over ``n`` ranks of which ``ranks_per_domain`` share a fast domain, every
    group of the job at once (FSDP: one per TP rank and replica).

    Inside one domain: the ring on the fast link. Across d domains: every chunk from
    another domain enters this one once per pass ((d - 1) / d of the tensor), for each
    of the groups with members here, through the domain's network ports; and the
    ring's steps pay the network's latency (a ring is as slow as its slowest hop).
    """
    if n <= 1:
        return 0.0
    inside = min(n, ranks_per_domain)
    domains = max(n // inside, 1)
    if domains == 1:
        return ring_collective(n, nbytes, machine.intra, passes)
    groups_here = machine.ranks_per_node * machine.nodes_per_domain / inside
    ports_gb_s = machine.inter.gb_s * machine.nodes_per_domain
    network = groups_here * passes * (domains - 1) / domains * nbytes / (ports_gb_s * 1e9)
    fast = passes * (n - 1) / n * nbytes / (machine.intra.gb_s * 1e9)
    return passes * (n - 1) * machine.inter.latency_us * 1e-6 + max(network, fast)


# ------------------------------------------------------------------------------- compute


def flops_per_token(shape: Qwen3Shape, seq_len: int, expert_padding: float = 1.0) -> float:
    """Training FLOPs per token as torchtitan counts them for MFU: 6 per active parameter
    (the input embedding's lookup excluded) + 12 L H Dh S for attention; an MoE's active
    experts x ``expert_padding`` (the blockwise kernel's empty slots are computed too)."""
    params = active_parameter_count(shape)
    if not shape.tie_embeddings:
        params -= shape.vocab_size * shape.dim  # the input table is a lookup
    if shape.is_moe:
        experts = shape.n_layers * shape.top_k * 3 * shape.dim * shape.moe_hidden_dim
        params += experts * (expert_padding - 1)
    attention = 12 * shape.n_layers * shape.n_heads * shape.head_dim * seq_len
    return 6 * params + attention


def expert_padding(shape: Qwen3Shape, tokens: int, block_size: int) -> float:
    """Slots the blockwise experts compute per real token-expert pair (>= 1; 1 without)."""
    if not shape.is_moe or block_size <= 0:
        return 1.0
    from ...model.moe_blockwise import num_blocks

    pairs = tokens * shape.top_k
    return num_blocks(tokens, shape.top_k, shape.n_experts, block_size) * block_size / pairs


# ---------------------------------------------------------------------------- estimate


@dataclass(frozen=True)
class StepEstimate:
    """Seconds per optimizer step of one rank, by term, and what a step trains."""

    compute_s: float  # matmuls and attention, every microbatch
    recompute_s: float
    fsdp_s: float  # all-gathers + gradient reduce-scatter, every microbatch (as if alone)
    hsdp_s: float  # gradient all-reduce across replicas, every microbatch
    tp_s: float
    exposed_s: float  # of the FSDP/HSDP collectives: what no compute hides
    step_s: float
    tokens_per_rank: int  # tokens a rank's data-parallel group trains per optimizer step
    tp: int
    microbatches: int
    expert_padding: float
    efficiency: float

    @property
    def tokens_per_s_per_rank(self) -> float:
        """Tokens per second per rank (torchtitan's ``tps``): a TP group shares its tokens."""
        return self.tokens_per_rank / self.tp / self.step_s

    def row(self) -> dict[str, float]:
        r = lambda x: round(x, 3)  # noqa: E731
        return {
            "compute s": r(self.compute_s),
            "recompute s": r(self.recompute_s),
            "FSDP s": r(self.fsdp_s),
            "HSDP s": r(self.hsdp_s),
            "exposed s": r(self.exposed_s),
            "TP s": r(self.tp_s),
            "step s": r(self.step_s),
        }

    def to_json(self) -> dict[str, float]:
        return {
            "compute_s": self.compute_s,
            "recompute_s": self.recompute_s,
            "fsdp_s": self.fsdp_s,
            "hsdp_s": self.hsdp_s,
            "exposed_comm_s": self.exposed_s,
            "tp_s": self.tp_s,
            "step_s": self.step_s,
            "microbatches": self.microbatches,
            "expert_padding": self.expert_padding,
            "efficiency": self.efficiency,
        }


def estimate_step(
    shape: Qwen3Shape,
    machine: Machine,
    *,
    nnodes: int,
    tp: int,
    dp_replicate: int,
    activation_checkpoint: str,
    local_batch: int,
    seq_len: int,
    reduce_bytes: int,
    microbatches: int = 1,
    compiled: bool = False,
    moe_block_size: int = 0,
) -> StepEstimate:
    """One rank's optimizer step on ``machine`` for this layout (the module docstring)."""
    world = nnodes * machine.ranks_per_node
    fsdp = world // (tp * dp_replicate)
    tokens = local_batch * seq_len  # one microbatch of a data-parallel rank
    efficiency = machine.mfu_efficiency(compiled)
    padding = expert_padding(shape, tokens // tp if tp > 1 else tokens, moe_block_size)
    peak = machine.peak_tflops * 1e12 * efficiency
    compute = flops_per_token(shape, seq_len, padding) * tokens / tp / peak
    recompute = compute * RECOMPUTE[activation_checkpoint]

    # what FSDP gathers and reduces: every parameter (every expert), in blocks
    params = shape.parameter_count()
    root = shape.vocab_size * shape.dim * (1 if shape.tie_embeddings else 2) + shape.dim
    block = (params - root) / shape.n_layers
    domain_ranks = machine.ranks_per_node * machine.nodes_per_domain
    fsdp_in_domain = max(domain_ranks // tp, 1)  # FSDP ranks of one group on a domain

    def gather(n_params: float) -> float:
        return group_collective(machine, fsdp, n_params * 2 / tp, fsdp_in_domain)

    def reduce_scatter(n_params: float) -> float:
        return group_collective(machine, fsdp, n_params * reduce_bytes / tp, fsdp_in_domain)

    def replica_all_reduce(n_params: float) -> float:
        """HSDP: each rank all-reduces its shard with its peers in the other replicas;
        replicas sit in other domains when the job spans them (torchtitan's mesh puts
        dp_replicate outermost), and then every rank of a node does so at once over
        the node's network link."""
        if dp_replicate <= 1:
            return 0.0
        shard = n_params * reduce_bytes / (tp * fsdp)
        if world <= domain_ranks:
            return all_reduce(dp_replicate, shard, machine.intra)
        return all_reduce(dp_replicate, shard * machine.ranks_per_node, machine.inter)

    block_ag = gather(block)
    block_rs, block_ar = reduce_scatter(block), replica_all_reduce(block)
    fwd_block = compute * FORWARD_SHARE / shape.n_layers
    bwd_block = (compute * (1 - FORWARD_SHARE) + recompute) / shape.n_layers
    windows = shape.n_layers * (
        max(fwd_block, block_ag) + max(bwd_block, block_ag + block_rs + block_ar)
    )
    # nothing hides the root's gather and the first block's, nor the last block's
    # reduction and the root's
    exposed_ends = gather(root) + block_ag + block_rs + block_ar
    exposed_ends += reduce_scatter(root) + replica_all_reduce(root)
    busy = compute + recompute
    tp_s = 0.0
    if tp > 1:
        per_collective = tokens * shape.dim * 2  # bf16 [tokens, dim], gathered
        n = TP_COLLECTIVES[activation_checkpoint] * shape.n_layers
        tp_s = n * ring_collective(tp, per_collective, machine.intra)
    microstep = windows + exposed_ends + tp_s
    fsdp_total = shape.n_layers * (2 * block_ag + block_rs) + 2 * gather(root)
    fsdp_total += reduce_scatter(root)
    hsdp_total = shape.n_layers * block_ar + replica_all_reduce(root)
    return StepEstimate(
        compute_s=compute * microbatches,
        recompute_s=recompute * microbatches,
        fsdp_s=fsdp_total * microbatches,
        hsdp_s=hsdp_total * microbatches,
        tp_s=tp_s * microbatches,
        exposed_s=(microstep - busy - tp_s) * microbatches,
        step_s=microstep * microbatches,
        tokens_per_rank=tokens * microbatches,
        tp=tp,
        microbatches=microbatches,
        expert_padding=padding,
        efficiency=efficiency,
    )
