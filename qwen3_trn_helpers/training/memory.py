"""Memory per rank: what a person works out on paper before a run, every term named.

Each term is a formula a notebook cell can print; ``qwen3-trn dry-run`` measures the
first three (parameters, gradients, optimizer state) for the real model and layout on
a CPU, and CI checks the two agree. Activations and buffers depend on kernels and
allocators we cannot run here, so they are estimates, and say so.

Terms, for P parameters on ``world`` ranks with tensor parallelism ``tp`` (FSDP takes
the rest, so every parameter is sharded ``world`` ways), tokens T = batch x seq_len:

- parameters fp32 (FSDP2 keeps fp32 master weights): 4 P / world bytes
- gradients fp32: 4 P / world
- AdamW's two moments fp32: 8 P / world
- FSDP buffers: the bf16 copy of the block being computed and the prefetched next one
  (2 x 2 B per parameter of a block / tp), the block's gradients before
  reduce-scatter (bf16, and their copy in the reduce dtype: 2 + 4 B with
  torchtitan's default fp32 reduction, 2 + 2 B with a bf16 one), and the same for the
  root module (embedding, output layer, final norm)
- MoE kernel copies (nki_moe on Trainium): the experts of a layer re-laid out as the
  kernel wants them ([E, H, 2, I] and [E, I, H] in bf16), saved by the kernel's
  autograd node for its backward: one layer's with full checkpointing (the block
  being recomputed), every layer's otherwise
- MoE kernel saved activations: ``moe_cte`` with ``checkpoint_activation=True``
  returns, for the backward, the gate/up outputs ([N, 2, I, B]) and the down
  projection's per-block outputs ([N, B, H]) in bf16, N = the dropless block count
  for T x top-k pairs (model/moe_blockwise.num_blocks): at Qwen3-30B-A3B and T =
  4,096, N = 255 blocks of 256 and 255 x 256 x (2 x 768 + 2048) x 2 B = 0.47 GB per
  layer; one layer's with full checkpointing, every layer's otherwise
- MoE kernel gradients: ``blockwise_mm_bwd`` returns the expert weight gradients in
  the kernel's layout ([E, H, 2, I] and [E, I, H], bf16: 1.21 GB per layer at
  30B-A3B), before autograd turns them into torchtitan's (counted in FSDP buffers);
  one layer at a time
- the Neuron runtime's own HBM (trn2.Topology.runtime_reserved_gib): 96 MB of
  microcode per physical core (Neuron docs, "Neuron device memory"), and for its
  scratchpad, DMA rings and collective buffers, which that page names but does not
  size, an assumed 1 GiB per logical core
- activations, sharded by tp (sequence parallelism), counted in bf16 values (an fp32
  tensor is two): what one eager torchtitan block saves for its backward, as
  ``plan --verify`` measures it (one block, torch's MemTracker, fake tensors; dense
  blocks). Without checkpointing per layer T x (10 d + 6 q + 6 kv + 4 F + 4 heads + 2
  kv_heads + 4): each RMSNorm (nn.RMSNorm -> F.rms_norm, whose composite path computes
  in fp32) keeps its fp32 input, fp32 normalised product and fp32 rstd, and the linear
  after it the bf16 output; q_norm and k_norm the same per head; SDPA q, k, v, its
  output and fp32 logsumexp; the MLP's gate, up, SiLU and product. Selective
  (torchtitan's SelectiveAC, distributed/activation_checkpoint.py: every second
  mm/linear recomputed, the SDPA ops in its save list kept): the block input, the
  fused qkv, w1 and w2 outputs (the 1st, 3rd and 5th of wqkv, wo, w1, w3, w2), and the
  attention output + logsumexp where the SDPA op is in that list (Neuron's
  ``_scaled_dot_product_fused_attention_overrideable``, CUDA's; not the CPU's
  ``_scaled_dot_product_flash_attention_for_cpu``). Full: the block input only, plus
  one block recomputed at a time
- logits: T x V / tp x (2 B bf16 + 4 B fp32 + 4 B fp32 gradient) / loss chunks
- attention scores, only where attention runs a mask through a generic (non-fused)
  implementation: T x S x heads / tp x 2 B per layer kept for the backward

A plan fits when the total is at most 90% of the core's HBM
(``trn2.RUN_HBM_SHARE``): the rest is margin for what no term here sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.shapes import Qwen3Shape
from ..trn2 import RUN_HBM_SHARE

GIB = 1024**3
#: below this much room between a plan's estimate and its usable HBM, the plan warns:
#: the runtime's own share is an assumption (``trn2.Topology.runtime_reserved_gib``), and
#: a real runtime, a compiler's scratch or a longer kernel schedule can take more
MIN_SLACK_GIB = 1.0


@dataclass(frozen=True)
class MemoryEstimate:
    params_gib: float
    grads_gib: float
    optimizer_gib: float
    fsdp_buffers_gib: float
    kernel_copies_gib: float
    kernel_saved_gib: float
    kernel_grads_gib: float
    activations_gib: float
    logits_gib: float
    scores_gib: float
    runtime_gib: float
    hbm_gib: float

    @property
    def sharded_state_gib(self) -> float:
        """Parameters + gradients + optimizer state: what the dry run measures."""
        return self.params_gib + self.grads_gib + self.optimizer_gib

    @property
    def total_gib(self) -> float:
        return (
            self.sharded_state_gib
            + self.fsdp_buffers_gib
            + self.kernel_copies_gib
            + self.kernel_saved_gib
            + self.kernel_grads_gib
            + self.activations_gib
            + self.logits_gib
            + self.scores_gib
            + self.runtime_gib
        )

    @property
    def usable_gib(self) -> float:
        """What a plan may use: 90% of the core's HBM (the rest is margin)."""
        return self.hbm_gib * RUN_HBM_SHARE

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.usable_gib

    @property
    def slack_gib(self) -> float:
        """Room left under the usable HBM (negative: the plan does not fit)."""
        return self.usable_gib - self.total_gib

    def slack_warning(self) -> str | None:
        """One line when a plan that fits leaves under :data:`MIN_SLACK_GIB` (else None)."""
        if not self.fits or self.slack_gib >= MIN_SLACK_GIB:
            return None
        return (
            f"the plan leaves {self.slack_gib:.2f} GiB per NeuronCore under the usable "
            f"{self.usable_gib:.1f} GiB, with the Neuron runtime's share assumed at "
            f"{self.runtime_gib:.1f} GiB: an out-of-memory is possible; a shorter --seq-len "
            "or more ranks gives room"
        )

    def terms(self) -> dict[str, float]:
        """GiB per rank by term, the totals left out (rounded as the table shows them)."""
        r = lambda x: round(x, 2)  # noqa: E731
        return {
            "params": r(self.params_gib),
            "grads": r(self.grads_gib),
            "AdamW": r(self.optimizer_gib),
            "FSDP buffers": r(self.fsdp_buffers_gib),
            "kernel copies": r(self.kernel_copies_gib),
            "kernel saved": r(self.kernel_saved_gib),
            "kernel grads": r(self.kernel_grads_gib),
            "activations": r(self.activations_gib),
            "logits": r(self.logits_gib),
            "scores": r(self.scores_gib),
            "Neuron runtime": r(self.runtime_gib),
        }

    def row(self) -> dict[str, float]:
        """The terms and the totals, as one table row."""
        r = lambda x: round(x, 2)  # noqa: E731
        return {
            **self.terms(),
            "total GiB": r(self.total_gib),
            f"usable GiB ({RUN_HBM_SHARE:.0%})": r(self.usable_gib),
            "HBM GiB": r(self.hbm_gib),
        }


def layer_activation_values(
    shape: Qwen3Shape, tokens: int, checkpointing: str, *, attention_saved: bool = True
) -> float:
    """bf16 values one transformer block keeps for its backward (before TP sharding).

    An fp32 tensor counts as two values; the terms are the module docstring's, and
    ``plan --verify`` measures them per mode. ``attention_saved``: selective
    checkpointing keeps the SDPA output because torchtitan's save list holds the SDPA
    op the device runs (Neuron, CUDA); the CPU's op is not in it (``--verify``: False).
    """
    s = shape
    heads, kv_heads = s.n_heads, s.n_kv_heads
    q, kv = heads * s.head_dim, kv_heads * s.head_dim
    f = s.top_k * s.moe_hidden_dim if s.is_moe else s.hidden_dim
    if checkpointing == "none":
        # fp32 input (2 d) and normalised product (2 d), fp32 rstd (2), bf16 output (d)
        norms = 2 * (5 * s.dim + 2)
        qk_norms = 4 * q + 2 * heads + 4 * kv + 2 * kv_heads  # the same, per head
        sdpa = q + 2 * kv + q + 2 * heads  # q, k, v in; output and fp32 logsumexp
        return tokens * (norms + qk_norms + sdpa + 4 * f)
    if checkpointing == "selective":
        kept = s.dim + (q + 2 * kv) + f + s.dim  # input; wqkv, w1, w2 outputs
        if attention_saved:
            kept += q + 2 * heads
        return tokens * kept
    if checkpointing == "full":
        return tokens * s.dim
    raise ValueError(f"activation checkpointing must be none, selective or full: {checkpointing}")


def estimate_memory(
    shape: Qwen3Shape,
    *,
    world: int,
    tp: int,
    seq_len: int,
    local_batch: int = 1,
    activation_checkpoint: str = "none",
    loss_chunks: int = 1,
    scores_materialised: bool = False,
    moe_kernel_copies: bool = False,
    moe_block_size: int = 0,
    reduce_bytes: int = 4,
    runtime_gib: float = 0.0,
    hbm_gib: float,
) -> MemoryEstimate:
    """Per-rank memory of one training step; see the module docstring for each term.

    ``moe_kernel_copies``: the NKI MoE kernels run (with ``moe_block_size`` tokens per
    block); ``reduce_bytes``: 4 for fp32 gradient reduction (torchtitan's default), 2
    for bf16; ``runtime_gib``: the Neuron runtime's own share (0 off Trainium).
    """
    s = shape
    n = s.parameter_count()
    shard = n / world
    root = s.vocab_size * s.dim * (1 if s.tie_embeddings else 2) + s.dim
    block = (n - root) / s.n_layers
    grads_before_reduce = 2 + reduce_bytes  # bf16 gradient + its copy in the reduce dtype
    fsdp_buffers = (2 * 2 * block + grads_before_reduce * block) / tp
    fsdp_buffers += (2 + grads_before_reduce) * root / tp
    tokens = seq_len * local_batch
    per_layer = layer_activation_values(s, tokens, activation_checkpoint)
    activations = s.n_layers * per_layer
    if activation_checkpoint == "full":  # one block recomputed at a time
        activations += layer_activation_values(s, tokens, "none")
    kernel_copies = kernel_saved = kernel_grads = 0.0
    if moe_kernel_copies and s.is_moe:
        from ..model.moe_blockwise import num_blocks

        kept = 1 if activation_checkpoint == "full" else s.n_layers
        experts_bf16 = s.n_experts * 3 * s.dim * s.moe_hidden_dim * 2
        kernel_copies = kept * experts_bf16
        blocks = num_blocks(tokens, s.top_k, s.n_experts, moe_block_size)
        kernel_saved = kept * blocks * moe_block_size * (2 * s.moe_hidden_dim + s.dim) * 2
        kernel_grads = experts_bf16
    scores = 0.0
    if scores_materialised:
        kept = {"none": s.n_layers, "selective": s.n_layers / 2, "full": 1}[activation_checkpoint]
        scores = kept * local_batch * s.n_heads * seq_len * seq_len * 2 / tp
    logits = tokens * s.vocab_size / tp * (2 + 4 + 4) / max(loss_chunks, 1)
    return MemoryEstimate(
        params_gib=4 * shard / GIB,
        grads_gib=4 * shard / GIB,
        optimizer_gib=8 * shard / GIB,
        fsdp_buffers_gib=fsdp_buffers / GIB,
        kernel_copies_gib=kernel_copies / GIB,
        kernel_saved_gib=kernel_saved / GIB,
        kernel_grads_gib=kernel_grads / GIB,
        activations_gib=2 * activations / tp / GIB,
        logits_gib=logits / GIB,
        scores_gib=scores / GIB,
        runtime_gib=runtime_gib,
        hbm_gib=hbm_gib,
    )
