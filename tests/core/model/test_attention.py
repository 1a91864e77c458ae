"""The SDPA attention backends compute packed-document causal attention exactly."""

import math

import torch
from torchtitan.models.common.attention import create_varlen_metadata_for_document

from qwen3_trn_helpers.model.attention import DocumentMaskedSDPA


def naive_attention(q, k, v, positions):
    """Loop over queries: attend to keys at or before it, in the same document."""
    B, L, N, H = q.shape
    rep = N // k.shape[2]
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    out = torch.zeros_like(q)
    for b in range(B):
        doc = torch.cumsum((positions[b] == 0).long(), 0)
        for i in range(L):
            keys = [j for j in range(i + 1) if doc[j] == doc[i]]
            scores = torch.einsum("nh,knh->nk", q[b, i], k[b, keys]) / math.sqrt(H)
            out[b, i] = torch.einsum("nk,knh->nh", scores.softmax(-1), v[b, keys])
    return out


def _check(positions):
    torch.manual_seed(0)
    B, L = positions.shape
    N, KV, H = 4, 2, 8
    q, k, v = (torch.randn(B, L, n, H, requires_grad=True) for n in (N, KV, KV))
    meta = create_varlen_metadata_for_document(positions)
    attn = DocumentMaskedSDPA.Config().build()
    out = attn(q, k, v, attention_masks=meta, enable_gqa=True)
    ref = naive_attention(q, k, v, positions)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    # backward exists on CPU (the reason this backend exists) and agrees too
    (g_out,) = torch.autograd.grad(out.square().sum(), q)
    (g_ref,) = torch.autograd.grad(ref.square().sum(), q)
    torch.testing.assert_close(g_out, g_ref, atol=1e-4, rtol=1e-4)
    return meta


def test_several_documents_per_sample_use_the_mask():
    positions = torch.tensor([list(range(5)) + list(range(7)), list(range(12))])
    meta = _check(positions)
    # the mask was built once and is shared by every layer of the forward pass
    assert DocumentMaskedSDPA._last is not None and DocumentMaskedSDPA._last[0] is meta.cu_seq_q


def test_one_document_per_sample_is_plain_causal():
    DocumentMaskedSDPA._last = None
    positions = torch.arange(12).expand(2, 12)
    _check(positions)
    assert DocumentMaskedSDPA._last is None  # is_causal path: no mask built at all
