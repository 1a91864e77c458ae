"""The blockwise MoE reference equals torchtitan's own MoE experts, values and gradients."""

import pytest
import torch
from torchtitan.models.common.config_utils import make_routed_experts_config

from qwen3_trn_helpers.model.moe_blockwise import (
    BlockwiseRoutedExperts,
    blockwise_mapping,
    num_blocks,
)


def routing(T, E, K, skew, seed):
    """Top-k routing with uneven expert loads (skew > 0 starves high-numbered experts)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, E, generator=g) - skew * torch.arange(E, dtype=torch.float32)
    scores, ids = torch.softmax(logits, -1).topk(K, dim=-1)
    return scores / scores.sum(-1, keepdim=True), ids


def pair(E, D, F, K, block, seed=0):
    """torchtitan's RoutedExperts and ours, built from one config, with equal weights."""
    cfg = make_routed_experts_config(
        dim=D, hidden_dim=F, num_experts=E, top_k=K, param_init={}, comm_backend="standard"
    )
    theirs = cfg.build()
    ours = BlockwiseRoutedExperts.Config(
        inner_experts=cfg.inner_experts,
        token_dispatcher=cfg.token_dispatcher,
        block_size=block,
        backend="reference",
    ).build()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def run(module, x, scores, ids):
    x = x.clone().requires_grad_()
    scores = scores.clone().requires_grad_()
    counts = torch.bincount(ids.flatten(), minlength=module.inner_experts.num_experts)
    out = module(x, scores, ids, counts)
    g = torch.Generator().manual_seed(1)
    (out * torch.randn(out.shape, generator=g)).sum().backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters()}
    return out.detach(), x.grad, scores.grad, grads


@pytest.mark.parametrize("block", [1, 4, 16, 128])
@pytest.mark.parametrize("skew", [0.0, 1.5])
def test_matches_torchtitan_routed_experts(block, skew):
    B, L, D, F, E, K = 2, 24, 32, 48, 8, 2
    theirs, ours = pair(E, D, F, K, block)
    scores, ids = routing(B * L, E, K, skew, seed=block)
    if skew:
        counts = torch.bincount(ids.flatten(), minlength=E)
        assert counts.max() > 3 * max(counts.min().item(), 1)  # the loads really are uneven
    x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(2))
    sc, ids = scores.view(B, L, K), ids.view(B, L, K)
    out_t, dx_t, ds_t, g_t = run(theirs, x, sc, ids)
    out_o, dx_o, ds_o, g_o = run(ours, x, sc, ids)
    # torchtitan computes experts in bf16; both sides do, so bf16-level tolerances.
    tol = {"atol": 2e-3, "rtol": 2e-2}
    torch.testing.assert_close(out_o, out_t, **tol)
    torch.testing.assert_close(dx_o, dx_t, **tol)
    torch.testing.assert_close(ds_o, ds_t, **tol)
    for name in g_t:
        # Weight gradients sum over many tokens in bf16; blocks change the summation
        # order, so allow a couple of bf16 ulps of the largest entry (one block per
        # expert, block 128 here, gives bit-identical results).
        bound = 2**-6 * g_t[name].abs().max().item()
        torch.testing.assert_close(g_o[name], g_t[name], atol=bound, rtol=0, msg=name)


def dense_loop(x_TD, scores_TK, ids_TK, w1, w2, w3):
    """fp32 ground truth: every (token, expert) pair computed on its own."""
    out = torch.zeros_like(x_TD)
    for t in range(x_TD.shape[0]):
        for k in range(ids_TK.shape[1]):
            e = ids_TK[t, k]
            h = torch.nn.functional.silu(w1[e] @ x_TD[t]) * (w3[e] @ x_TD[t])
            out[t] += scores_TK[t, k] * (w2[e] @ h)
    return out


@pytest.mark.parametrize("block", [2, 8, 64])
def test_fp32_reference_is_exact(block):
    from qwen3_trn_helpers.model.moe_blockwise import blockwise_experts_reference, kernel_weights

    T, D, F, E, K = 20, 16, 24, 6, 3
    _, ours = pair(E, D, F, K, block)
    scores, ids = routing(T, E, K, 2.0, seed=3)
    x = torch.randn(T, D, generator=torch.Generator().manual_seed(4), requires_grad=True)
    scores.requires_grad_()
    e = ours.inner_experts
    weights = (e.w1_EFD, e.w2_EDF, e.w3_EFD)
    gate_up, down = kernel_weights(*weights)
    pos, b2e = blockwise_mapping(ids, E, block)
    aff = torch.zeros(T + 1, E).scatter(1, ids, scores)
    hidden = torch.cat([x, torch.zeros(1, D)])
    out = blockwise_experts_reference(
        hidden, aff, gate_up, down, pos, b2e, block, compute_dtype=None
    )
    want = dense_loop(x, scores, ids, *weights)
    torch.testing.assert_close(out[:T], want, atol=1e-5, rtol=1e-5)
    assert out[T].abs().max() == 0  # the padding token stays zero
    g = torch.randn(T, D, generator=torch.Generator().manual_seed(6))
    ours_grads = torch.autograd.grad((out[:T] * g).sum(), (x, scores, *weights))
    want_grads = torch.autograd.grad((want * g).sum(), (x, scores, *weights))
    for a, b in zip(ours_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_mapping_is_dropless_and_padded():
    T, E, K, B = 50, 8, 2, 4
    _, ids = routing(T, E, K, 1.0, seed=5)
    pos, b2e = blockwise_mapping(ids, E, B)
    assert pos.numel() == num_blocks(T, K, E, B) * B == b2e.numel() * B
    slots = pos.view(-1, B)
    for e in range(E):
        tokens = slots[b2e == e].flatten()
        tokens = tokens[tokens != T]
        want = torch.nonzero((ids == e).any(-1)).flatten()
        assert torch.equal(tokens, want)  # every routed token once, in ascending order
    assert torch.all(b2e[1:] >= b2e[:-1])  # blocks grouped by expert
