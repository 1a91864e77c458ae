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
compiled): fitted on a published run (``planner/backtest.py`` says which), measured by
``plan --measure`` (a calibration file, which then wins), or stated as assumed. MoE
experts computed by the blockwise kernel (nki_moe) are counted with their padding: a
rank's T x top-k token-expert pairs take ``num_blocks`` x block size slots
(model/moe_blockwise.num_blocks), about 2x at Qwen3-30B-A3B, local batch 1.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..device import DEVICES, Device, as_device
from ..model.shapes import Qwen3Shape, active_parameter_count
from ..trn2 import (
    EFA_GBIT_S_PER_NODE,
    HBM_GIB_PER_CHIP,
    NEURONLINK_GB_S_PER_CHIP,
    PHYSICAL_CORES_PER_CHIP,
    TFLOPS_PER_PHYSICAL_CORE,
    Topology,
)

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
#: A planned layout may fill at most this share of the memory a run may use
#: (``MemoryEstimate.usable_gib``, 90% of HBM, the rule ``train`` applies): the rest of
#: it is the planner's margin for what the estimate does not see.
PLAN_HEADROOM = 0.9
#: Per-step latency of a ring step, microseconds. NCCL's own tuning model
#: (NVIDIA/nccl src/graph/tuning.cc, ``hwLat``, Ring / Simple protocol, the one large
#: messages use): 3.4 us over NVLink, 14 us over the network.
NVLINK_LATENCY_US = 3.4
NET_LATENCY_US = 14.0
#: Neuron publishes no per-hop latency for its collectives; assumed equal to NCCL's
#: figures for the same kinds of link (NeuronLink like NVLink, EFA like the network).
NEURONLINK_LATENCY_US = NVLINK_LATENCY_US
EFA_LATENCY_US = NET_LATENCY_US
#: The largest job the planner will reason about: a larger count is a typo, not a plan
MAX_NODES = 4096


@dataclass(frozen=True)
class Link:
    """A link's alpha-beta constants: bandwidth in GB/s (one direction) and latency."""

    gb_s: float
    latency_us: float


@dataclass(frozen=True)
class Machine:
    """What the cost model needs of a machine (a node type), with where each came from."""

    key: str  # --machine
    name: str
    device: Device  # the torch device a run on it uses
    ranks_per_node: int  # torchrun ranks per node (one node = one instance)
    ranks_per_chip: int  # TP stays inside this many ranks
    peak_tflops: float  # dense bf16, per rank
    hbm_gib: float  # per rank
    runtime_gib: float  # per rank, held by the device runtime
    intra: Link  # per rank, between ranks of one fast domain
    inter: Link  # per node, to other domains
    efficiency: dict[str, float]  # mode (eager, compiled) -> share of the peak reached
    efficiency_source: str
    nodes_per_domain: int = 1  # nodes on one NeuronLink/NVLink domain (an UltraServer: 4)
    max_nodes: int = MAX_NODES
    calibrated: str | None = None  # the calibration file whose efficiency this uses
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def device_type(self) -> str:
        return self.device.type

    def mfu_efficiency(self, compiled: bool) -> float:
        mode = "compiled" if compiled else "eager"
        return self.efficiency.get(mode, self.efficiency["eager"])

    def constants(self) -> list[dict[str, object]]:
        """The constants, as table rows (the plan prints them)."""
        eff = ", ".join(f"{m} {v:.3f}" for m, v in self.efficiency.items())
        return [
            {"constant": "peak bf16 TFLOPS per rank", "value": float(f"{self.peak_tflops:.3g}"),
             "source": self.sources.get("peak", "")},
            {"constant": "efficiency (share of peak)", "value": eff,
             "source": self.efficiency_source},
            {"constant": "HBM GiB per rank", "value": round(self.hbm_gib, 1),
             "source": self.sources.get("hbm", "")},
            {"constant": "link GB/s per rank, inside a domain", "value": round(self.intra.gb_s, 1),
             "source": self.sources.get("intra", "")},
            {"constant": "link GB/s per node, between domains", "value": round(self.inter.gb_s, 1),
             "source": self.sources.get("inter", "")},
            {"constant": "latency us per ring step (inside / between)",
             "value": f"{self.intra.latency_us} / {self.inter.latency_us}",
             "source": self.sources.get("latency", "")},
            {"constant": "recompute (share of 6 FLOPs/param/token)",
             "value": "selective 1/6, full 2/6", "source": "forward is 2 of 6 (Narayanan 2021)"},
            {"constant": "TP collectives per block", "value": "8 / 10 / 12 (none/sel./full)",
             "source": "sequence parallel (Korthikanti 2022)"},
            {"constant": "planner headroom", "value": f"{PLAN_HEADROOM:.0%} of usable memory",
             "source": "margin for what the memory estimate does not see"},
        ]  # fmt: skip


# ---------------------------------------------------------------------------- machines

#: H100 SXM: 989 dense bf16 TFLOPS (NVIDIA H100 Tensor Core GPU datasheet, "BF16 Tensor
#: Core 1,979 teraFLOPS*" with sparsity, half dense); NVLink 4: 900 GB/s per GPU both
#: directions (same datasheet), 450 one way.
H100_TFLOPS = 989.0
NVLINK4_GB_S = 450.0
#: Efficiency fitted on torchtitan's published Llama 3.1 8B runs (backtest.py,
#: ``FITTED_ON``): the share of the peak that makes the model's tokens/s equal the
#: 8-GPU row's, eager and compiled. Every other row is a prediction.
H100_EFFICIENCY = {"eager": 0.396, "compiled": 0.458}
H100_EFFICIENCY_SOURCE = (
    "fitted: torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 1 (8B, 8 GPUs: "
    "FSDP eager 5,762, + torch.compile 6,667 tokens/s/GPU); other rows predicted"
)


def _h100(key: str, name: str, hbm_gib: float, inter_gb_s: float, hbm_source: str) -> Machine:
    return Machine(
        key=key,
        name=name,
        device=DEVICES["cuda"],
        ranks_per_node=8,
        ranks_per_chip=8,  # TP over the node's NVLink
        peak_tflops=H100_TFLOPS,
        hbm_gib=hbm_gib,
        runtime_gib=0.0,  # the CUDA context is outside torch's reserved memory
        intra=Link(NVLINK4_GB_S, NVLINK_LATENCY_US),
        inter=Link(inter_gb_s, NET_LATENCY_US),
        efficiency=dict(H100_EFFICIENCY),
        efficiency_source=H100_EFFICIENCY_SOURCE,
        sources={
            "peak": "NVIDIA H100 SXM datasheet: 989 dense BF16 TFLOPS",
            "hbm": hbm_source,
            "intra": "NVLink 4: 900 GB/s per GPU, both directions (H100 datasheet)",
            "inter": "network per node (see the machine's name)",
            "latency": "NCCL src/graph/tuning.cc hwLat, Ring/Simple: NVLink 3.4, net 14",
        },
    )


def trn2_machine(lnc: int, *, ultraserver: bool = False) -> Machine:
    """A trn2.48xlarge at this LNC (trn2.py's documented figures), or a trn2 UltraServer:
    4 of them on one NeuronLink domain (AWS, "Amazon EC2 Trn2 instances and
    UltraServers": 64 Trainium2 chips connected with NeuronLink), each a torchrun node."""
    topo = Topology(lnc)
    key = "trn2u" if ultraserver else "trn2"
    return Machine(
        key=key,
        name=(
            f"trn2.48xlarge in UltraServers of 4 (one NeuronLink domain), LNC {lnc}"
            if ultraserver
            else f"trn2.48xlarge, LNC {lnc}"
        ),  # fmt: skip
        device=DEVICES["neuron"],
        ranks_per_node=topo.logical_cores,
        ranks_per_chip=topo.cores_per_chip,
        peak_tflops=topo.peak_tflops_per_core,
        hbm_gib=topo.hbm_gib_per_core,
        runtime_gib=topo.runtime_reserved_gib,
        intra=Link(NEURONLINK_GB_S_PER_CHIP / topo.cores_per_chip, NEURONLINK_LATENCY_US),
        inter=Link(EFA_GBIT_S_PER_NODE / 8, EFA_LATENCY_US),
        nodes_per_domain=4 if ultraserver else 1,
        efficiency={"eager": H100_EFFICIENCY["eager"]},
        efficiency_source=(
            "assumed: the H100 eager fit carried over (AWS publishes no trn2 MFU for "
            "torchtitan); plan --measure on trn2 writes the measured one"
        ),
        sources={
            "peak": f"{TFLOPS_PER_PHYSICAL_CORE} dense BF16 TFLOPS per physical NeuronCore-v3 "
            f"x LNC {lnc} (Trainium2: 667 per chip of {PHYSICAL_CORES_PER_CHIP})",
            "hbm": f"{HBM_GIB_PER_CHIP} GiB per Trainium2 / {topo.cores_per_chip} ranks",
            "intra": f"NeuronLink-v3 {NEURONLINK_GB_S_PER_CHIP:.0f} GB/s per chip / "
            f"{topo.cores_per_chip} ranks (Neuron docs, Trainium2 architecture)"
            + ("; across an UltraServer's 4 instances assumed the same" if ultraserver else ""),
            "inter": f"EFAv3 {EFA_GBIT_S_PER_NODE:.0f} Gbit/s per trn2.48xlarge (AWS Trn2 page)",
            "latency": "assumed: NCCL's NVLink / network figures (Neuron publishes none)",
        },
    )


def cpu_machine(ranks: int, peak_flops: float) -> Machine:
    """This CPU as the plan's machine: ``peak_flops`` measured, shared by ``ranks``."""
    from ..runs.run import available_memory_gib

    return Machine(
        key="cpu",
        name=f"this CPU, {ranks} rank(s)",
        device=DEVICES["cpu"],
        ranks_per_node=ranks,
        ranks_per_chip=ranks,
        peak_tflops=peak_flops / 1e12 / ranks,
        hbm_gib=available_memory_gib() / ranks,
        runtime_gib=0.0,
        # gloo over shared memory: an assumed 5 GB/s per rank and 20 us a step (not
        # measured; a CPU plan exists to test the mechanism, --measure checks it)
        intra=Link(5.0, 20.0),
        inter=Link(5.0, 20.0),
        max_nodes=1,
        efficiency={"eager": 0.5},
        efficiency_source="assumed; plan --measure here writes the measured one",
        sources={
            "peak": "measured: bf16 2048^3 matmul with all threads (cpu_peak.py), "
            "split over the ranks",
            "hbm": "this machine's free memory, split over the ranks",
            "intra": "assumed (gloo, shared memory)",
            "inter": "assumed",
            "latency": "assumed",
        },
    )


#: the --machine key of this machine's CPU (a catalogue key, not a device name)
CPU_MACHINE = "cpu"


def default_machine_key(device: Device | str) -> str:
    """The machine ``--device`` plans for without ``--machine``: this CPU, else a trn2."""
    return CPU_MACHINE if as_device(device).is_cpu else "trn2"


#: --machine choices, each described in one line (the CLI's help)
MACHINES = {
    "trn2": "trn2.48xlarge: 16 Trainium2, 64 ranks at LNC 2, EFAv3 3.2 Tbps",
    "trn2u": "trn2 UltraServer: 4 trn2.48xlarge on one NeuronLink domain (--nodes counts "
    "instances, a multiple of 4)",
    "h100": "8 x H100 SXM 80 GB, NVLink 4, 3.2 Tbps network (p5.48xlarge)",
    "h100-96gb": "8 x H100 96 GB HBM2e (Meta's Grand Teton, torchtitan's benchmarks), 400 "
    "Gb/s RDMA per GPU",
    "h200": "8 x H200 141 GB, NVLink 4, 3.2 Tbps EFA (p5en.48xlarge)",
    "cpu": "this machine's CPU (--nproc ranks)",
}


def get_machine(key: str, *, nproc: int | None = None, lnc: int | None = None) -> Machine:
    """The named machine, with its calibration applied if one was measured."""
    from ..errors import ConfigError

    if key in ("trn2", "trn2u"):
        from ..trn2 import lnc_from_env

        machine = trn2_machine(lnc or lnc_from_env(), ultraserver=key == "trn2u")
    elif key == "h100":
        machine = _h100(key, "8 x H100 SXM 80 GB (p5.48xlarge)", 80 * 1e9 / 2**30, 400.0,
                        "80 GB HBM3 (H100 SXM datasheet)")  # fmt: skip
    elif key == "h100-96gb":
        machine = _h100(key, "8 x H100 96 GB HBM2e (Grand Teton)", 96 * 1e9 / 2**30, 400.0,
                        "96 GB HBM2e (torchtitan's benchmark page, Hardware)")  # fmt: skip
        rdma = "400 Gb/s RDMA per GPU (torchtitan's benchmark page)"
        machine = replace(machine, sources={**machine.sources, "inter": rdma})
    elif key == "h200":
        machine = _h100(key, "8 x H200 141 GB (p5en.48xlarge)", 141 * 1e9 / 2**30, 400.0,
                        "141 GB HBM3e (NVIDIA H200 datasheet)")  # fmt: skip
        machine = replace(machine, efficiency_source=(
            "the H100 fit carried over: the same GH100 die and 989 dense TFLOPS "
            "(H200 datasheet); " + H100_EFFICIENCY_SOURCE))  # fmt: skip
    elif key == CPU_MACHINE:
        from ..cpu_peak import cpu_matmul_peak

        machine = cpu_machine(nproc or 1, cpu_matmul_peak())
    else:
        raise ConfigError(f"unknown machine {key!r}; choose one of {', '.join(MACHINES)}")
    return apply_calibration(machine)


# ------------------------------------------------------------------------- calibration


def calibration_path() -> Path:
    """Where ``plan --measure`` writes what it measured (``QWEN3_TRN_CALIBRATION`` moves it)."""
    default = Path("~/.cache/qwen3-trn/calibration.json").expanduser()
    return Path(os.environ.get("QWEN3_TRN_CALIBRATION", default))


def calibration_key(machine: Machine, compiled: bool) -> str:
    """A calibration holds one efficiency per machine (and rank count on a CPU) and mode."""
    ranks = f"/{machine.ranks_per_node}" if machine.device.is_cpu else ""
    return f"{machine.key}{ranks}/{'compiled' if compiled else 'eager'}"


def apply_calibration(machine: Machine) -> Machine:
    """``machine`` with the efficiencies measured on it, if a calibration file holds any."""
    path = calibration_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return machine
    if not isinstance(data, dict):
        return machine
    measured, peak = {}, None
    for mode in ("eager", "compiled"):
        entry = data.get(calibration_key(machine, mode == "compiled"))
        if isinstance(entry, dict) and isinstance(entry.get("efficiency"), (int, float)):
            if 0 < entry["efficiency"] <= 1:
                measured[mode] = float(entry["efficiency"])
                if isinstance(entry.get("peak_tflops"), (int, float)) and entry["peak_tflops"] > 0:
                    peak = float(entry["peak_tflops"])
    if not measured:
        return machine
    # the efficiency is a share of the peak it was measured against: a CPU's peak is
    # timed anew by every plan (and moves with the machine's load), so the calibration
    # keeps the one it used
    return replace(
        machine,
        peak_tflops=peak if machine.device.is_cpu and peak else machine.peak_tflops,
        efficiency={**machine.efficiency, **measured},
        efficiency_source=f"measured by plan --measure ({path}): {', '.join(measured)}",
        calibrated=str(path),
    )


def write_calibration(machine: Machine, compiled: bool, efficiency: float, detail: dict) -> Path:
    """Record a measured efficiency for ``machine``; later plans on it use it."""
    path = calibration_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    entry = {"efficiency": efficiency, "peak_tflops": machine.peak_tflops, **detail}
    data[calibration_key(machine, compiled)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


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
    from ..model.moe_blockwise import num_blocks

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
