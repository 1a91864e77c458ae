"""The planner's step-time model: FLOPs at a peak, bytes over links, every constant cited.

A layout's step is estimated per rank as

    step = max(compute + recompute, FSDP all-gathers/reduce-scatter + HSDP all-reduce)
           + 2 blocks' FSDP/HSDP share + TP collectives

FSDP's collectives overlap the compute (torchtitan prefetches the next block's
parameters and reduce-scatters while the backward runs), except the first block's
all-gather and the last one's gradient reduction, which nothing hides; tensor
parallelism's sit between the matmuls that need them, so they add. Every collective is
a ring: a rank sends and receives (n - 1) / n of the tensor for an all-gather or a
reduce-scatter, twice that for an all-reduce. Across nodes the node's EFA is the
bottleneck: a collective that spans k nodes moves (k - 1) / k of the node's whole share
over it.

What only trn2 can confirm: the matmul efficiency (assumed, ``MATMUL_EFFICIENCY``), that
the link figures are reached by the collectives, how far FSDP's collectives really
overlap, and the TP link (inside a chip; here the chip's NeuronLink share, a lower
bound). The model ranks layouts; ``qwen3-trn plan --measure`` times them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.shapes import Qwen3Shape, active_parameter_count
from ..trn2 import (
    EFA_GBIT_S_PER_NODE,
    NEURONLINK_GB_S_PER_CHIP,
    PHYSICAL_CORES_PER_CHIP,
    TFLOPS_PER_PHYSICAL_CORE,
    Topology,
)

#: Share of the peak the model's matmuls reach: an assumption, not a measurement (AWS
#: publishes no MFU for these recipes); it scales compute against communication, so it
#: can change which layout wins. `plan --measure` on trn2 replaces it with timings.
MATMUL_EFFICIENCY = 0.5
#: Extra compute of activation checkpointing, as a share of the step's 6 FLOPs per
#: parameter and token (forward 2, backward 4; Narayanan et al. 2021, "Efficient
#: Large-Scale Language Model Training on GPU Clusters", sec. 3.5): full recomputes the
#: whole forward (+2/6); torchtitan's selective (op) policy saves every other matmul's
#: output (torchtitan/distributed/activation_checkpoint.py), so it recomputes about half
#: the forward's matmuls (+1/6).
RECOMPUTE = {"none": 0.0, "selective": 1 / 6, "full": 2 / 6}
#: TP collectives per transformer block and step, with sequence parallelism: an
#: all-gather before attention and before the MLP, a reduce-scatter after each, forward
#: and backward (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
#: Transformer Models", sec. 4.2.2); full checkpointing repeats the forward's four;
#: torchtitan's selective policy saves the reduce-scatters' outputs and repeats the
#: all-gathers.
TP_COLLECTIVES = {"none": 8, "selective": 10, "full": 12}


@dataclass(frozen=True)
class Machine:
    """What the cost model needs of the machine a plan is for, with where each came from."""

    name: str
    device_type: str
    ranks_per_node: int
    ranks_per_chip: int  # TP stays inside a chip
    peak_tflops: float  # per rank
    intra_gb_s: float  # per rank, between ranks of one node
    inter_gb_s: float  # per node, to other nodes
    sources: dict[str, str] = field(default_factory=dict)

    def constants(self) -> list[dict[str, object]]:
        """The constants, as table rows (the plan prints them)."""
        return [
            {"constant": "peak bf16 TFLOPS per rank", "value": self.peak_tflops,
             "source": self.sources.get("peak", "")},
            {"constant": "matmul efficiency (assumed)", "value": MATMUL_EFFICIENCY,
             "source": "assumption; trn2 measurements replace it (plan --measure)"},
            {"constant": "link GB/s per rank, inside a node", "value": round(self.intra_gb_s, 1),
             "source": self.sources.get("intra", "")},
            {"constant": "link GB/s per node, between nodes", "value": round(self.inter_gb_s, 1),
             "source": self.sources.get("inter", "")},
            {"constant": "recompute (share of 6 FLOPs/param/token)",
             "value": "selective 1/6, full 2/6", "source": "forward is 2 of 6 (Narayanan 2021)"},
            {"constant": "TP collectives per block", "value": "8 / 10 / 12 (none/sel./full)",
             "source": "sequence parallel (Korthikanti 2022)"},
        ]  # fmt: skip


def trn2_machine(lnc: int) -> Machine:
    """A trn2.48xlarge at this LNC (trn2.py's documented figures)."""
    topo = Topology(lnc)
    return Machine(
        name=f"trn2.48xlarge, LNC {lnc}",
        device_type="neuron",
        ranks_per_node=topo.logical_cores,
        ranks_per_chip=topo.cores_per_chip,
        peak_tflops=topo.peak_tflops_per_core,
        intra_gb_s=NEURONLINK_GB_S_PER_CHIP / topo.cores_per_chip,
        inter_gb_s=EFA_GBIT_S_PER_NODE / 8,
        sources={
            "peak": f"{TFLOPS_PER_PHYSICAL_CORE} dense BF16 TFLOPS per physical NeuronCore-v3 "
            f"x LNC {lnc} (Trainium2: 667 per chip of {PHYSICAL_CORES_PER_CHIP})",
            "intra": f"NeuronLink-v3 {NEURONLINK_GB_S_PER_CHIP:.0f} GB/s per chip / "
            f"{topo.cores_per_chip} ranks (Neuron docs, Trainium2 architecture)",
            "inter": f"EFAv3 {EFA_GBIT_S_PER_NODE:.0f} Gbit/s per trn2.48xlarge (AWS Trn2 page)",
        },
    )


def cpu_machine(ranks: int, peak_flops: float) -> Machine:
    """This CPU as the plan's machine: ``peak_flops`` measured, shared by ``ranks``."""
    return Machine(
        name=f"this CPU, {ranks} rank(s)",
        device_type="cpu",
        ranks_per_node=ranks,
        ranks_per_chip=ranks,
        peak_tflops=peak_flops / 1e12 / ranks,
        # gloo over shared memory: an assumed 5 GB/s per rank (not measured; a CPU plan
        # exists to test the mechanism, and its ranking is what --measure checks)
        intra_gb_s=5.0,
        inter_gb_s=5.0,
        sources={
            "peak": "measured: bf16 2048^3 matmul with all threads (lessons.preflight), "
            "split over the ranks",
            "intra": "assumed (gloo, shared memory)",
            "inter": "assumed",
        },
    )


@dataclass(frozen=True)
class StepEstimate:
    """Seconds per step of one rank, by term, and what a step trains."""

    compute_s: float
    recompute_s: float
    fsdp_s: float  # all-gathers (forward, backward) + gradient reduce-scatter
    hsdp_s: float  # gradient all-reduce across replicas
    tp_s: float
    tokens_per_rank: int  # tokens a rank's data-parallel group trains per step
    tp: int
    n_layers: int

    @property
    def exposed_comm_s(self) -> float:
        """The first block's all-gather and the last one's reduction: not overlapped."""
        return 2 * self.overlapped_comm_s / self.n_layers

    @property
    def overlapped_comm_s(self) -> float:
        return self.fsdp_s + self.hsdp_s

    @property
    def step_s(self) -> float:
        busy = max(self.compute_s + self.recompute_s, self.overlapped_comm_s)
        return busy + self.exposed_comm_s + self.tp_s

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
            "TP s": r(self.tp_s),
            "step s": r(self.step_s),
        }


def flops_per_token(shape: Qwen3Shape, seq_len: int) -> float:
    """Training FLOPs per token as torchtitan counts them for MFU: 6 per active parameter
    (the input embedding's lookup excluded) + 12 L H Dh S for attention."""
    params = active_parameter_count(shape)
    if not shape.tie_embeddings:
        params -= shape.vocab_size * shape.dim  # the input table is a lookup
    attention = 12 * shape.n_layers * shape.n_heads * shape.head_dim * seq_len
    return 6 * params + attention


def _ring(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


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
) -> StepEstimate:
    """One rank's step on ``machine`` for this layout (see the module docstring)."""
    world = nnodes * machine.ranks_per_node
    fsdp = world // (tp * dp_replicate)
    tokens = local_batch * seq_len
    peak = machine.peak_tflops * 1e12 * MATMUL_EFFICIENCY
    compute = flops_per_token(shape, seq_len) * tokens / tp / peak
    # recompute: a share of the 6-FLOP step (attention's part counted alike)
    recompute = compute * RECOMPUTE[activation_checkpoint]

    params = shape.parameter_count()  # every expert: FSDP gathers them all
    gathered = params * 2 / tp  # bf16 parameters of this rank's TP shard
    # ranks of one FSDP group on a node, and nodes it spans
    per_node = max(machine.ranks_per_node // tp, 1)
    fsdp_in = min(fsdp, per_node)
    fsdp_nodes = max(fsdp // fsdp_in, 1)
    volume = 2 * gathered + gathered * reduce_bytes / 2  # 2 all-gathers + 1 reduce-scatter
    fsdp_s = _ring(fsdp_in) * volume / (machine.intra_gb_s * 1e9)
    if fsdp_nodes > 1:  # the node's share of every group crosses its EFA
        node_volume = volume * tp * _ring(fsdp_nodes)
        fsdp_s = max(fsdp_s, node_volume / (machine.inter_gb_s * 1e9))
    hsdp_s = 0.0
    if dp_replicate > 1:
        shard_grads = params * reduce_bytes / (tp * fsdp)
        if nnodes > 1:
            node_grads = shard_grads * machine.ranks_per_node
            hsdp_s = 2 * _ring(dp_replicate) * node_grads / (machine.inter_gb_s * 1e9)
        else:
            hsdp_s = 2 * _ring(dp_replicate) * shard_grads / (machine.intra_gb_s * 1e9)
    tp_s = 0.0
    if tp > 1:
        per_collective = _ring(tp) * tokens * shape.dim * 2  # bf16 [tokens, dim]
        n = TP_COLLECTIVES[activation_checkpoint] * shape.n_layers
        tp_s = n * per_collective / (machine.intra_gb_s * 1e9)
    return StepEstimate(
        compute_s=compute,
        recompute_s=recompute,
        fsdp_s=fsdp_s,
        hsdp_s=hsdp_s,
        tp_s=tp_s,
        tokens_per_rank=tokens,
        tp=tp,
        n_layers=shape.n_layers,
    )
