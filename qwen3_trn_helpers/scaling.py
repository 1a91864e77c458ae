"""Numbers for scaling out on a trn2.48xlarge: cores, memory per core, MFU, launch command.

The memory figures are back-of-envelope estimates (what a person would work out on paper
before a run), not measurements: they say which terms dominate and why the layouts in
the presets fit. CI cannot check them against hardware.
"""

from __future__ import annotations

from dataclasses import dataclass

from .variants import Preset, get_preset

# trn2.48xlarge (AWS instance documentation)
CHIPS = 16
PHYSICAL_CORES_PER_CHIP = 8
HBM_GIB_PER_CHIP = 96
TRN2_TFLOPS_PER_PHYSICAL_CORE = 79  # BF16 dense, TensorEngine (what torchtitan uses)


@dataclass(frozen=True)
class Topology:
    lnc: int = 2  # NEURON_LOGICAL_NC_CONFIG: physical cores fused into one logical core

    @property
    def physical_cores(self) -> int:
        return CHIPS * PHYSICAL_CORES_PER_CHIP

    @property
    def logical_cores(self) -> int:
        return self.physical_cores // self.lnc

    @property
    def hbm_gib_per_logical_core(self) -> float:
        return HBM_GIB_PER_CHIP * CHIPS / self.logical_cores

    @property
    def peak_tflops_per_logical_core(self) -> float:
        """torchtitan's trn2 number: 79 TFLOPS x LNC (tools/utils.py get_peak_flops)."""
        return TRN2_TFLOPS_PER_PHYSICAL_CORE * self.lnc


def params_and_flops_per_token(preset: Preset, seq_len: int) -> tuple[int, int]:
    """torchtitan's own count (``get_nparams_and_flops``) on a meta-device model."""
    import torch

    from .variants import native_model_config

    config = native_model_config(preset.shape, moe_block_size=0)
    with torch.device("meta"):
        model = config.build()
    return config.get_nparams_and_flops(model, seq_len)


@dataclass(frozen=True)
class MemoryEstimate:
    preset: str
    layout: str
    seq_len: int
    params_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    activations_full_ac_gib: float
    hbm_gib: float

    @property
    def total_gib(self) -> float:
        return self.params_gib + self.grads_gib + self.optimizer_gib + self.activations_gib

    @property
    def total_full_ac_gib(self) -> float:
        return self.params_gib + self.grads_gib + self.optimizer_gib + self.activations_full_ac_gib

    def row(self) -> dict[str, object]:
        r = lambda x: round(x, 2)  # noqa: E731
        return {
            "preset": self.preset,
            "layout": self.layout,
            "seq len": self.seq_len,
            "params (fp32) GiB": r(self.params_gib),
            "grads GiB": r(self.grads_gib),
            "AdamW GiB": r(self.optimizer_gib),
            "activations GiB": r(self.activations_gib),
            "total GiB": r(self.total_gib),
            "total, full AC": r(self.total_full_ac_gib),
            "HBM per core GiB": r(self.hbm_gib),
        }


def memory_per_core(
    name: str, seq_len: int | None = None, local_batch: int = 1, topology: Topology = Topology()
) -> MemoryEstimate:
    """Per-logical-core memory for a preset at its trn2 layout.

    - parameters, gradients (fp32) and AdamW's two moments (fp32) are sharded over
      TP x FSDP ranks (FSDP2 keeps fp32 master weights; bf16 copies are transient);
    - activations (bf16, no activation checkpointing) per layer and sequence:
      S*h*(10 + 24/t) bytes for attention and norms (Korthikanti et al. 2022, with an
      attention kernel that never materialises the S x S scores) plus the MLP's
      intermediate: 3 * S * F_active * 2 bytes / t, where F_active is the dense MLP's
      width or top_k x the expert width for MoE; plus fp32 logits of one loss chunk;
    - with full activation checkpointing only each layer's input (S*h*2 bytes) is kept.
    """
    preset = get_preset(name)
    s, t = preset.shape, preset.layout.tp
    seq = seq_len or preset.seq_len
    world = topology.logical_cores
    shards = world  # TP x FSDP = every rank holds 1/world of the parameters
    n_params, _ = params_and_flops_per_token(preset, seq)
    gib = 1024**3
    per_shard = n_params / shards
    tokens = seq * local_batch
    f_active = s.top_k * s.moe_hidden_dim if s.is_moe else s.hidden_dim
    per_layer = tokens * s.dim * (10 + 24 / t) + 3 * tokens * f_active * 2 / t
    logits_chunk = tokens * s.vocab_size * 4 / 8  # torchtitan's chunked loss: 8 chunks
    return MemoryEstimate(
        preset=name,
        layout=preset.layout.describe(world),
        seq_len=seq,
        params_gib=per_shard * 4 / gib,
        grads_gib=per_shard * 4 / gib,
        optimizer_gib=per_shard * 8 / gib,
        activations_gib=(per_layer * s.n_layers + logits_chunk) / gib,
        activations_full_ac_gib=(tokens * s.dim * 2 * s.n_layers + logits_chunk) / gib,
        hbm_gib=topology.hbm_gib_per_logical_core,
    )


def mfu_percent(
    tokens_per_s_per_core: float, flops_per_token: float, topology: Topology = Topology()
) -> float:
    """Model FLOPs utilisation as torchtitan logs it: achieved / peak BF16 FLOPs."""
    return (
        100
        * tokens_per_s_per_core
        * flops_per_token
        / (topology.peak_tflops_per_logical_core * 1e12)
    )


def tokens_per_s_for_mfu(
    mfu: float, flops_per_token: float, topology: Topology = Topology()
) -> float:
    return mfu / 100 * topology.peak_tflops_per_logical_core * 1e12 / flops_per_token


def trn2_launch_command(
    variant: str = "native",
    init: str = "pretrained",
    steps: int = 10,
    topology: Topology = Topology(),
) -> str:
    """The exact command for the AWS setup: one torchrun rank per logical NeuronCore."""
    from .variants import DEFAULT_PRESETS

    preset = DEFAULT_PRESETS[variant][1]
    return (
        f"NEURON_LOGICAL_NC_CONFIG={topology.lnc} torchrun --standalone --nnodes=1 "
        f"--nproc-per-node={topology.logical_cores} -m qwen3_trn_helpers train "
        f"--variant {variant} --preset {preset} --init {init} --steps {steps} "
        f"--local-batch-size 1 --out runs/trn2-{variant}-{init}"
    )
