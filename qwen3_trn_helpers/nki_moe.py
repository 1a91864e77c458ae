"""Trainium only: the blockwise MoE experts on nki-library's NKI kernels.

CI cannot run this module (there is no Trainium machine in CI) and no test imports it;
it is written against the documented APIs and verified by users on trn2:

- forward: ``nkilib.core.moe.moe_cte.moe_cte`` with ``MoECTESpec(shard_on_i,
  ShardOnIConfig(checkpoint_activation=True))``: returns the output and the two
  activation checkpoints the backward needs;
- backward: ``nkilib.experimental.moe.bwd.blockwise_mm_backward.blockwise_mm_bwd``
  (experimental in nki-library): gradients for hidden states, affinities and both
  weight tensors;
- registration: ``torch_neuronx.nki_op`` makes the pair one PyTorch custom op with an
  autograd formula (TorchNeuron's guide "how to work with NKI", SDK >= 2.33).

The tensor layouts are exactly those of
:func:`qwen3_trn_helpers.moe_blockwise.blockwise_experts_reference`, which tests prove
equal to torchtitan's own MoE. Kernel constraints (trn2, LNC=2): block size a multiple
of 256 for the forward and one of 128/256/512/1024 for the backward; H a multiple of
512 in [512, 8192]; I a multiple of 16. Qwen3-30B-A3B (H 2048, I 768) fits with B=256.
"""

from __future__ import annotations

import torch

_OP = None


def _expert_flat(affinities: torch.Tensor) -> torch.Tensor:
    return affinities.reshape(-1, 1)  # [(T+1)*E, 1], the kernel's layout


def _register():
    """Build the custom op on first use (imports exist only inside a Neuron venv)."""
    global _OP
    if _OP is not None:
        return _OP
    from nkilib.core.moe.moe_cte.moe_cte import (
        MoECTEImplementation,
        MoECTESpec,
        ShardOnIConfig,
        moe_cte,
    )
    from nkilib.experimental.moe.bwd.blockwise_mm_backward import blockwise_mm_bwd
    from torch_neuronx import nki_op

    @nki_op("qwen3_trn::blockwise_moe", mutates_args={})
    def blockwise_moe(
        hidden_states: torch.Tensor,
        affinities_flat: torch.Tensor,
        gate_up: torch.Tensor,
        down: torch.Tensor,
        position_to_id: torch.Tensor,
        block_to_expert: torch.Tensor,
        block_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # Config objects cannot cross a custom-op schema: build them here.
        spec = MoECTESpec(
            implementation=MoECTEImplementation.shard_on_i,
            shard_on_I=ShardOnIConfig(checkpoint_activation=True),
        )
        return moe_cte(
            hidden_states,
            affinities_flat,
            gate_up,
            down,
            position_to_id,
            block_to_expert,
            block_size,
            spec,
            is_tensor_update_accumulating=True,  # top-k > 1: a token sums K blocks
        )

    def setup_context(ctx, inputs, output):
        hidden, aff, gate_up, down, pos, b2e, block_size = inputs
        _, gate_up_act_T, down_act = output
        ctx.save_for_backward(hidden, aff, gate_up, down, pos, b2e, gate_up_act_T, down_act)
        ctx.block_size = block_size

    def backward(ctx, d_out, _d_gu_act, _d_down_act):
        hidden, aff, gate_up, down, pos, b2e, gate_up_act_T, down_act = ctx.saved_tensors
        d_hidden, d_aff, d_gate_up, d_down = blockwise_mm_bwd(
            hidden,
            aff,
            gate_up,
            down,
            gate_up_act_T,
            down_act,
            pos,
            b2e,
            d_out.contiguous(),
            ctx.block_size,
        )
        return d_hidden, d_aff, d_gate_up, d_down, None, None, None

    blockwise_moe.register_autograd(backward, setup_context=setup_context)
    _OP = blockwise_moe
    return _OP


def blockwise_experts_nki(
    hidden_states: torch.Tensor,
    expert_affinities: torch.Tensor,
    gate_up_proj_weight: torch.Tensor,
    down_proj_weight: torch.Tensor,
    token_position_to_id: torch.Tensor,
    block_to_expert: torch.Tensor,
    block_size: int,
) -> torch.Tensor:
    """Same contract as ``blockwise_experts_reference``, on the NKI kernels."""
    op = _register()
    dtype = torch.bfloat16  # the kernels want one float dtype for every tensor
    out, _, _ = op(
        hidden_states.to(dtype),
        _expert_flat(expert_affinities).to(dtype),
        gate_up_proj_weight.to(dtype).contiguous(),
        down_proj_weight.to(dtype).contiguous(),
        token_position_to_id.to(torch.int32),
        block_to_expert.to(torch.int32).reshape(-1, 1),
        block_size,
    )
    return out.to(hidden_states.dtype)
