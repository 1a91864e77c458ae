"""Attention for packed documents through ``scaled_dot_product_attention``.

torchtitan 0.3.0 trains language models with FlexAttention (compiled with inductor;
no backward on CPU; not what the Neuron compiler lowers) or VarlenAttention
(FlashAttention's varlen kernel, CUDA only). Off CUDA we swap the inner attention
through torchtitan's own override mechanism (``--override.imports``, see
``torchtitan/config/override.py``), so the model config stays torchtitan's and the
swap is one line in the ``Trainer.Config`` and one line in torchtitan's log:

- :func:`document_sdpa` (``attention="document"``, the CPU default): exact packed-
  document attention. A token sees earlier tokens of its own document only, as with
  torchtitan's flex/varlen masks. When every sample holds a single document (most
  samples at short sequence lengths) that is plain causal attention and runs as
  ``is_causal=True`` with no mask; otherwise one dense boolean mask is built per
  forward pass and shared by every layer. Compiled (``--compile``), the mask is
  always built inside the graph from the document boundaries, whose number is a
  symbolic size: one graph for every packing, no recompile mid-run.
- :func:`causal_sdpa` (``attention="causal"``, the trn2 default, as in AWS's recipe):
  torchtitan's own ``ScaledDotProductAttention``: plain causal, no mask at all, so
  documents packed into one sample can see each other (RoPE positions still restart
  at each document). Neuron's attention kernel refuses explicit masks and falls back
  to a generic implementation that materialises the L x L scores per head; this
  keeps trn2 on the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchtitan.config.override import derive, override
from torchtitan.models.common.attention import (
    FlexAttention,
    ScaledDotProductAttention,
    VarlenAttention,
    VarlenMetadata,
)


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
    """Inner attention that trains anywhere SDPA has a backward (CPU included).

    Subclasses torchtitan's ``VarlenAttention`` only for its metadata: the trainer
    then builds document boundaries (``cu_seq``) once per forward pass, without
    compiling anything.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(VarlenAttention.Config):
        pass

    # The last mask built and the boundaries it was built from. Every layer of one
    # forward pass receives the same metadata object, so the mask is built once.
    _last: tuple[torch.Tensor, torch.Tensor] | None = None

    def _mask(self, cu_seq: torch.Tensor, batch: int, seq_len: int) -> torch.Tensor:
        # eager only: inside a compiled block the mask is part of the graph (a few fused
        # integer ops), and a Python-side cache would be a side effect dynamo cannot keep
        last = DocumentMaskedSDPA._last
        if last is not None and last[0] is cu_seq and last[1].shape[-1] == seq_len:
            return last[1]
        mask = document_causal_mask(cu_seq, batch, seq_len)
        DocumentMaskedSDPA._last = (cu_seq, mask)
        return mask

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
        cu_seq = attention_masks.cu_seq_q
        q, k, v = (x.transpose(1, 2) for x in (q_BLNH, k_BLNH, v_BLNH))
        if torch.compiler.is_compiling():
            # One graph for every packing: the mask from the boundaries, whatever their
            # number (a symbolic size, see mark_document_count_dynamic). A branch on the
            # count would be a guard, and each new side or count a recompile mid-run.
            mask = document_causal_mask(cu_seq, batch, seq_len)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
            )
        # One start per sample (and the end): a shape test, no device sync.
        elif cu_seq.numel() == batch + 1:
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=scale, enable_gqa=enable_gqa
            )
        else:
            mask = self._mask(cu_seq, batch, seq_len)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
            )
        return out.transpose(1, 2)


def mark_document_count_dynamic(masks: object) -> None:
    """Compile the document boundaries' length as a symbolic size from the first step.

    Called on each batch's attention metadata before the compiled blocks see it.
    Otherwise dynamo compiles the first batch's document count as a constant and
    compiles again, seconds to minutes, at the first batch that packs another count.
    """
    if isinstance(masks, VarlenMetadata):
        for boundaries in {id(t): t for t in (masks.cu_seq_q, masks.cu_seq_k)}.values():
            torch._dynamo.maybe_mark_dynamic(boundaries, 0)


@override(
    target=FlexAttention.Config,
    description="packed-document attention through SDPA (trains on CPU and Neuron)",
)
def document_sdpa(config: FlexAttention.Config) -> DocumentMaskedSDPA.Config:
    return derive(config, DocumentMaskedSDPA.Config)


@override(
    target=FlexAttention.Config,
    description="plain causal SDPA, no mask (AWS's trn2 recipe)",
)
def causal_sdpa(config: FlexAttention.Config) -> ScaledDotProductAttention.Config:
    return derive(config, ScaledDotProductAttention.Config)


#: attention choice -> the torchtitan override target that selects it (flex: none)
OVERRIDES = {
    "document": f"{__name__}.document_sdpa",
    "causal": f"{__name__}.causal_sdpa",
}
