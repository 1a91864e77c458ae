"""The machines the planner prices a step on, every figure cited: trn2 (one node of 16
Trainium2 chips, or a Trn2 UltraServer), the H100 hosts torchtitan published its runs
on, and this CPU (its measured peak); each with its links and the one fitted efficiency
per mode, which a calibration file (``plan --measure``) overrides. cost.py prices a step
on one."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...device import DEVICES, Device, as_device
from ...files import MiB, read_json
from ...trn2 import (
    EFA_GBIT_S_PER_NODE,
    HBM_GIB_PER_CHIP,
    NEURONLINK_GB_S_PER_CHIP,
    PHYSICAL_CORES_PER_CHIP,
    TFLOPS_PER_PHYSICAL_CORE,
    Topology,
)

#: The planner's own margin: a planned layout may fill at most this share of what a run
#: may use (``MemoryEstimate.usable_gib``: ``trn2.RUN_HBM_SHARE`` of a core's HBM, the rule
#: ``train`` applies; on a CPU, its free memory, the CPU run's rule). The rest is room for
#: what the estimate does not see. One meaning, one name: the run's share is another.
PLANNER_MARGIN = 0.9
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
#: H100 SXM: 989 dense bf16 TFLOPS (NVIDIA H100 Tensor Core GPU datasheet, "BF16 Tensor
#: Core 1,979 teraFLOPS*" with sparsity, half dense); NVLink 4: 900 GB/s per GPU both
#: directions (same datasheet), 450 one way.
H100_TFLOPS = 989.0
NVLINK4_GB_S = 450.0
#: What a ring over an H100's NVLink carries, as NCCL itself models it: 20.6 GB/s per
#: NVLink link on Hopper (NVIDIA/nccl src/graph/topo.h, ``SM90_NVLINK_BW``; topo.cc
#: connects a GPU to its NVSwitches at links x that) x the H100 SXM's 18 NVLink links
#: (H100 datasheet: "18 NVLink connections") = 370.8 GB/s, 82% of the datasheet's 450 one
#: way. The cost model's collectives inside an H100 node use it: derived, not fitted
#: (torchtitan's TP rows in tests/ops/planner/backtest.py are predictions).
NCCL_SM90_NVLINK_GB_S_PER_LINK = 20.6
H100_NVLINK_LINKS = 18
H100_RING_GB_S = NCCL_SM90_NVLINK_GB_S_PER_LINK * H100_NVLINK_LINKS
#: Efficiency fitted on torchtitan's published Llama 3.1 8B runs (backtest.py,
#: ``FITTED_ON``): the share of the peak that makes the model's tokens/s equal the
#: 8-GPU row's, eager and compiled. Every other row is a prediction.
H100_EFFICIENCY = {"eager": 0.396, "compiled": 0.459}
H100_EFFICIENCY_SOURCE = (
    "fitted: torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 1 (8B, 8 GPUs: "
    "FSDP eager 5,762, + torch.compile 6,667 tokens/s/GPU); other rows predicted"
)


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
            {"constant": "planner margin", "value": f"{PLANNER_MARGIN:.0%} of usable memory",
             "source": "room for what the memory estimate does not see"},
        ]  # fmt: skip


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
        intra=Link(H100_RING_GB_S, NVLINK_LATENCY_US),
        inter=Link(inter_gb_s, NET_LATENCY_US),
        efficiency=dict(H100_EFFICIENCY),
        efficiency_source=H100_EFFICIENCY_SOURCE,
        sources={
            "peak": "NVIDIA H100 SXM datasheet: 989 dense BF16 TFLOPS",
            "hbm": hbm_source,
            "intra": f"NCCL's ring over NVLink 4: 18 links x {NCCL_SM90_NVLINK_GB_S_PER_LINK} GB/s "
            "(nccl src/graph/topo.h SM90_NVLINK_BW; the datasheet's peak: 450 one way)",
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
    from ...runs.run import available_memory_gib

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
    "trn2u": "trn2 UltraServer: 4 trn2.48xlarge on one NeuronLink domain (--nnodes counts "
    "instances, a multiple of 4)",
    "h100": "8 x H100 SXM 80 GB, NVLink 4, 3.2 Tbps network (p5.48xlarge)",
    "h100-96gb": "8 x H100 96 GB HBM2e (Meta's Grand Teton, torchtitan's benchmarks), 400 "
    "Gb/s RDMA per GPU",
    "h200": "8 x H200 141 GB, NVLink 4, 3.2 Tbps EFA (p5en.48xlarge)",
    "cpu": "this machine's CPU (--nproc ranks)",
}


def get_machine(key: str, *, nproc: int | None = None, lnc: int | None = None) -> Machine:
    """The named machine, with its calibration applied if one was measured."""
    from ...errors import ConfigError

    if key in ("trn2", "trn2u"):
        from ...trn2 import lnc_from_env

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
        from ...cpu_peak import cpu_matmul_peak

        machine = cpu_machine(nproc or 1, cpu_matmul_peak())
    else:
        raise ConfigError(f"unknown machine {key!r}; choose one of {', '.join(MACHINES)}")
    return apply_calibration(machine)


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
        data = read_json(path, limit=16 * MiB, fix="", want=None)  # (files.py: no pipe, ...)
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
        data = read_json(path, limit=16 * MiB, fix="", want=None)  # (files.py: no pipe, ...)
    except (OSError, ValueError):
        data = {}
    entry = {"efficiency": efficiency, "peak_tflops": machine.peak_tflops, **detail}
    data[calibration_key(machine, compiled)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path
