"""Packed-document causal attention through ``scaled_dot_product_attention``.

torchtitan 0.3.0 offers two masked attention backends for language models:
FlexAttention (compiled with inductor; no backward on CPU) and VarlenAttention
(FlashAttention's varlen kernel, CUDA only). Neither trains on a CPU, so here is a
third backend, plugged in through torchtitan's own config tree rather than by patching
its code: it reuses ``VarlenAttention.Config``'s metadata (document boundaries as
cumulative lengths, which torchtitan builds without compiling anything) and turns it
into a dense boolean mask for SDPA. Same maths as the flex/varlen masks: a token sees
earlier tokens of its own document only.

The dense mask costs O(L^2) memory per sequence, which is nothing at the tutorial's
CPU sequence lengths. It is also the portable choice for a device whose compiler does
not lower FlexAttention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchtitan.models.common.attention import VarlenAttention, VarlenMetadata


def document_causal_mask(cu_seq: torch.Tensor, batch: int, seq_len: int) -> torch.Tensor:
    """Boolean mask [B, 1, L, L]: True where query i may attend to key j.

    ``cu_seq`` holds the start offset of every document in the flattened batch, then
    the total token count (torchtitan's ``create_varlen_metadata_for_document``).
    """
    total = batch * seq_len
    token = torch.arange(total, device=cu_seq.device)
    doc = (torch.searchsorted(cu_seq.to(torch.int64), token, right=True) - 1).view(batch, seq_len)
    pos = torch.arange(seq_len, device=cu_seq.device)
    causal = pos[:, None] >= pos[None, :]
    same_doc = doc[:, :, None] == doc[:, None, :]
    return (same_doc & causal)[:, None]


class DocumentMaskedSDPA(VarlenAttention):
    """Inner attention that trains anywhere SDPA has a backward (CPU included)."""

    @dataclass(kw_only=True, slots=True)
    class Config(VarlenAttention.Config):
        pass

    def forward(  # type: ignore[override]
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: VarlenMetadata,
        scale: float | None = None,
        enable_gqa: bool = False,
        out_transform=None,
        **kwargs,
    ) -> torch.Tensor:
        if out_transform is not None:
            raise NotImplementedError("DocumentMaskedSDPA does not return the log-sum-exp")
        if not isinstance(attention_masks, VarlenMetadata):
            raise TypeError(f"expected VarlenMetadata, got {type(attention_masks).__name__}")
        batch, seq_len = q_BLNH.shape[:2]
        mask = document_causal_mask(attention_masks.cu_seq_q, batch, seq_len)
        out = F.scaled_dot_product_attention(
            q_BLNH.transpose(1, 2),
            k_BLNH.transpose(1, 2),
            v_BLNH.transpose(1, 2),
            attn_mask=mask,
            scale=scale,
            enable_gqa=enable_gqa,
        )
        return out.transpose(1, 2)
