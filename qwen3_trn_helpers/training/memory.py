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
  reduce-scatter (bf16 and their fp32 cast, 6 B), and the same for the root module
  (embedding, output layer, final norm)
- MoE kernel copies (nki_moe on Trainium): the experts of a layer re-laid out as the
  kernel wants them ([E, H, 2, I] and [E, I, H] in bf16), for the layer running and one
  saved for its backward
- activations, bf16, sharded by tp (sequence parallelism): per layer T x (4 d + 3 q +
  3 kv + 4 F) values without checkpointing (norm inputs and outputs; q and k before and
  after norm/RoPE, v, the attention output; the MLP's gate, up, SiLU and product);
  with selective checkpointing the block input, half the matmul outputs and the
  attention output; with full checkpointing the block input only, plus one block
  recomputed at a time
- logits: T x V / tp x (2 B bf16 + 4 B fp32 + 4 B fp32 gradient) / loss chunks
- attention scores, only where attention runs a mask through a generic (non-fused)
  implementation: T x S x heads / tp x 2 B per layer kept for the backward
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.shapes import Qwen3Shape

GIB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    params_gib: float
    grads_gib: float
    optimizer_gib: float
    fsdp_buffers_gib: float
    kernel_copies_gib: float
    activations_gib: float
    logits_gib: float
    scores_gib: float
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
            + self.activations_gib
            + self.logits_gib
            + self.scores_gib
        )

    @property
    def fits(self) -> bool:
        return self.total_gib < self.hbm_gib

    def row(self) -> dict[str, float]:
        r = lambda x: round(x, 2)  # noqa: E731
        return {
            "params": r(self.params_gib),
            "grads": r(self.grads_gib),
            "AdamW": r(self.optimizer_gib),
            "FSDP buffers": r(self.fsdp_buffers_gib),
            "kernel copies": r(self.kernel_copies_gib),
            "activations": r(self.activations_gib),
            "logits": r(self.logits_gib),
            "scores": r(self.scores_gib),
            "total GiB": r(self.total_gib),
            "HBM GiB": r(self.hbm_gib),
        }


def layer_activation_values(shape: Qwen3Shape, tokens: int, checkpointing: str) -> float:
    """bf16 values one transformer block keeps for its backward (before TP sharding)."""
    s = shape
    q, kv = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
    f = s.top_k * s.moe_hidden_dim if s.is_moe else s.hidden_dim
    if checkpointing == "none":
        return tokens * (4 * s.dim + 3 * q + 3 * kv + 4 * f)
    if checkpointing == "selective":
        matmul_outputs = q + 2 * kv + s.dim + 2 * f + s.dim
        return tokens * (s.dim + matmul_outputs / 2 + q)
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
    hbm_gib: float,
) -> MemoryEstimate:
    """Per-rank memory of one training step; see the module docstring for each term."""
    s = shape
    n = s.parameter_count()
    shard = n / world
    root = s.vocab_size * s.dim * (1 if s.tie_embeddings else 2) + s.dim
    block = (n - root) / s.n_layers
    fsdp_buffers = (2 * 2 * block + 6 * block + 8 * root) / tp
    kernel_copies = 0.0
    if moe_kernel_copies and s.is_moe:
        kernel_copies = 2 * s.n_experts * 3 * s.dim * s.moe_hidden_dim * 2
    tokens = seq_len * local_batch
    per_layer = layer_activation_values(s, tokens, activation_checkpoint)
    activations = s.n_layers * per_layer
    if activation_checkpoint == "full":  # one block recomputed at a time
        activations += layer_activation_values(s, tokens, "none")
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
        activations_gib=2 * activations / tp / GIB,
        logits_gib=logits / GIB,
        scores_gib=scores / GIB,
        hbm_gib=hbm_gib,
    )
