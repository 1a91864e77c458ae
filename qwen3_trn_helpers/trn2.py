"""Facts about a trn2.48xlarge, from AWS's documentation, in one place.

16 Trainium2 chips, 8 physical NeuronCore-v3 each. The Neuron runtime groups physical
cores into *logical* cores (LNC, ``NEURON_LOGICAL_NC_CONFIG``; 2 on trn2 by default), and
PyTorch sees one ``neuron`` device per logical core. Memory and peak FLOPs per device
follow from that grouping. Plain data: nothing here touches a device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CHIPS = 16
PHYSICAL_CORES_PER_CHIP = 8
HBM_GIB_PER_CHIP = 96
#: dense BF16 TFLOPS of one physical NeuronCore-v3's TensorEngine
TFLOPS_PER_PHYSICAL_CORE = 79
DEFAULT_LNC = 2
#: HBM the Neuron runtime keeps for itself on every physical core: "a micro-code overhead
#: of 96MB per physical Neuron Core" (Neuron docs 2.33, Neuron Runtime > Neuron device
#: memory, category "model code"); read as MiB, the larger reading
RUNTIME_MICROCODE_MB_PER_PHYSICAL_CORE = 96
#: The runtime's other own categories on that page (scratchpad and shared scratchpad,
#: DMA rings, collectives; profile buffers only when profiling) have no documented
#: size: they depend on the compiled graphs. An assumption, stated as one: 1 GiB per
#: logical core, to be replaced by what neuron-top shows on the 4b_native_64ranks rung.
RUNTIME_OTHER_GIB_PER_LOGICAL_CORE_ASSUMED = 1.0
#: share of a core's HBM a run may fill with what the memory estimate counts (the rule
#: ``train`` applies before it starts): the rest is margin for what no estimate sees
#: (allocator fragmentation, compiler temporaries, the runtime's own assumed share
#: being low). The planner keeps a margin of its own on top (ops/planner/machines.py,
#: ``PLANNER_MARGIN``): another meaning, another name.
RUN_HBM_SHARE = 0.9
#: NeuronLink-v3 between Trainium2 chips: "provides 1.28 TB/sec bandwidth per device"
#: (Neuron docs, About Neuron > Architecture > Trainium2, chip components, NeuronLink).
#: The planner's cost model (ops/planner/cost.py) gives each logical core its share.
NEURONLINK_GB_S_PER_CHIP = 1280.0
#: EFA of one trn2.48xlarge: 3.2 Tbps of EFAv3 networking (AWS, Amazon EC2 Trn2
#: instances page, trn2.48xlarge "Network bandwidth"), shared by the node's ranks.
EFA_GBIT_S_PER_NODE = 3200.0


def lnc_from_env() -> int:
    """Physical cores per logical core, as the Neuron runtime will use them."""
    value = os.environ.get("NEURON_LOGICAL_NC_CONFIG", str(DEFAULT_LNC))
    if value not in ("1", "2"):
        raise ValueError(f"NEURON_LOGICAL_NC_CONFIG must be 1 or 2 on trn2, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Topology:
    lnc: int = DEFAULT_LNC

    @property
    def physical_cores(self) -> int:
        return CHIPS * PHYSICAL_CORES_PER_CHIP

    @property
    def logical_cores(self) -> int:
        """Ranks: one training process per logical core."""
        return self.physical_cores // self.lnc

    @property
    def cores_per_chip(self) -> int:
        return PHYSICAL_CORES_PER_CHIP // self.lnc

    @property
    def hbm_gib_per_core(self) -> float:
        return HBM_GIB_PER_CHIP * CHIPS / self.logical_cores

    @property
    def runtime_reserved_gib(self) -> float:
        """HBM per logical core the Neuron runtime holds: microcode (documented, per
        physical core) + scratchpad, DMA rings and collectives (assumed; see above)."""
        microcode = RUNTIME_MICROCODE_MB_PER_PHYSICAL_CORE * self.lnc / 1024
        return microcode + RUNTIME_OTHER_GIB_PER_LOGICAL_CORE_ASSUMED

    @property
    def peak_tflops_per_core(self) -> float:
        """What one logical core can do: LNC physical cores' TensorEngines.

        torchtitan 0.3.0 (tools/utils.py ``get_peak_flops``) returns 79e12 x 2 for every
        trn2 device whatever the LNC, which halves MFU at LNC 1 no matter what; our
        metrics use this value instead (training/metrics.py).
        """
        return TFLOPS_PER_PHYSICAL_CORE * self.lnc


TRN2 = Topology()


def core_slice(text: str, logical_cores: int = TRN2.logical_cores) -> range:
    """``"8-15"`` (or ``"8"``) -> the logical NeuronCores 8..15, checked against the machine.

    The syntax is the Neuron runtime's own for ``NEURON_RT_VISIBLE_CORES`` (a core or an
    inclusive range). Raises ValueError with the reason; callers add the fix.
    """
    first_text, dash, last_text = str(text).strip().partition("-")
    if not first_text.isdigit() or (dash and not last_text.isdigit()):
        raise ValueError(f"{text!r} is not a core or a range of cores such as 8-15")
    first = int(first_text)
    last = int(last_text) if dash else first
    if first > last:
        raise ValueError(f"{text!r} runs backwards; write the lower core first ({last}-{first})")
    if last >= logical_cores:
        raise ValueError(
            f"{text!r} goes past core {logical_cores - 1}; a trn2.48xlarge has logical "
            f"cores 0-{logical_cores - 1} at LNC {DEFAULT_LNC}"
        )
    return range(first, last + 1)


def slice_problem(text: str, nproc: int, *, on_trn2: bool, device_type: str) -> str | None:
    """What is wrong with giving a run's ``nproc`` ranks per node the cores ``text``
    (``--neuron-cores``) on a ``device_type`` machine, or None: one core a rank, on trn2
    only. (``text`` is valid: the spec checked it.)"""
    if not on_trn2:
        return (
            f"neuron_cores {text} chooses NeuronCores on a trn2, but this run trains on "
            f"{device_type!r}; drop --neuron-cores (or run it on trn2)"
        )
    cores = core_slice(text)
    if len(cores) != nproc:
        return (
            f"neuron_cores {text} holds {len(cores)} cores but the run starts {nproc} "
            f"rank(s) per node, one core each: give {cores.start}-{cores.start + nproc - 1} "
            f"or --nproc {len(cores)}"
        )
    return None


def rank_visible_core(text: str, local_rank: int) -> str:
    """The ``NEURON_RT_VISIBLE_CORES`` of the rank ``local_rank`` of a run given ``text``.

    Each rank owns one logical core: the slice's first plus its local rank, the offset
    torch-neuronx itself uses (core = LOCAL_RANK) when the variable is unset.
    """
    cores = core_slice(text)
    if not 0 <= local_rank < len(cores):
        raise ValueError(f"local rank {local_rank} has no core in slice {text!r}")
    return str(cores[local_rank])
