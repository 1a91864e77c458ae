"""The CPU attention backend computes packed-document causal attention exactly."""

import math

import torch
from torchtitan.models.common.attention import create_varlen_metadata_for_document

from qwen3_trn_helpers.attention import DocumentMaskedSDPA


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


def test_matches_naive_document_causal_attention():
    torch.manual_seed(0)
    B, L, N, KV, H = 2, 12, 4, 2, 8
    positions = torch.tensor([list(range(5)) + list(range(7)), list(range(12))])
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
