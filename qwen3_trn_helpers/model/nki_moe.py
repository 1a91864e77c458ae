"""Trainium only: the blockwise MoE experts on nki-library's NKI kernels.

CI cannot run this module (there is no Trainium machine in CI) and no test imports it;
it is written against the documented APIs (Neuron SDK 2.33: ``nki.jit``,
``torch_neuronx.nki_op``; aws-neuron/nki-library ``moe_cte`` and the experimental
``blockwise_mm_bwd``) and checked on trn2 by the smoke ladder's ``nki_moe_kernel`` rung
(``qwen3-trn smoke``), which compares it with the PyTorch reference, forward and
gradients.

- forward: ``moe_cte`` with ``MoECTESpec(shard_on_i, ShardOnIConfig(checkpoint_activation
  =True))`` returns the output and the two activation checkpoints the backward needs;
- backward: ``blockwise_mm_bwd`` returns d_hidden, d_affinities, d_gate_up, d_down;
- registration: ``torch_neuronx.nki_op`` makes the pair one PyTorch custom op, and the
  op's ``register_autograd`` attaches the backward.

Three launch rules, each a defect if broken:

- the grid: a kernel launched without one runs on one physical core; nki-library tests
  these kernels at LNC 2 and vllm-neuron launches its MoE kernel as ``kernel[2]``. We
  launch with the logical core's size (``NEURON_LOGICAL_NC_CONFIG``, trn2 default 2),
  which must also match the compiler's LNC;
- hashable arguments: the torch-to-NKI bridge hashes every non-tensor argument to key
  its kernel cache, and ``MoECTESpec`` (a mutable dataclass) is not hashable, so the
  spec is built inside a trace-mode wrapper that takes only tensors and flat scalars
  (vllm-neuron's ``functional/moe/moe_cte.py`` does the same);
- one dtype: the kernels want every float tensor in the same dtype (bf16 here).

The tensor layouts are exactly those of
:func:`qwen3_trn_helpers.model.moe_blockwise.blockwise_experts_reference`, which tests
prove equal to torchtitan's own MoE; shapes the kernels reject never get here
(``moe_blockwise.select_backend``).
"""

from __future__ import annotations

import torch

from ..trn2 import lnc_from_env

_OP = None


def _register():
    """Build the custom op on first use (these imports exist only in a Neuron venv)."""
    global _OP
    if _OP is not None:
        return _OP
    import nki
    from nkilib.core.moe.moe_cte.moe_cte import (
        ExpertAffinityScaleMode,
        MoECTEImplementation,
        MoECTESpec,
        ShardOnIConfig,
        moe_cte,
    )
    from nkilib.experimental.moe.bwd.blockwise_mm_backward import blockwise_mm_bwd
    from torch_neuronx import nki_op

    @nki.jit(mode="trace")
    def moe_cte_for_training(
        hidden_states,
        expert_affinities_masked,
        gate_up_proj_weight,
        down_proj_weight,
        token_position_to_id,
        block_to_expert,
        block_size: int,
    ):
        # Built here, inside the trace, from flat scalars: the bridge hashes kernel
        # arguments and MoECTESpec is not hashable.
        spec = MoECTESpec(
            implementation=MoECTEImplementation.shard_on_i,
            shard_on_I=ShardOnIConfig(checkpoint_activation=True),
        )
        return moe_cte(
            hidden_states,
            expert_affinities_masked,
            gate_up_proj_weight,
            down_proj_weight,
            token_position_to_id,
            block_to_expert,
            block_size,
            spec,
            is_tensor_update_accumulating=True,  # top-k > 1: a token sums K blocks
            # scale expert outputs by the routing weight after the down projection, as
            # Qwen3 (and torchtitan) do; the baseline kernel's own default is PRE_SCALE
            expert_affinities_scaling_mode=ExpertAffinityScaleMode.POST_SCALE,
        )

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
        grid = lnc_from_env()
        # the op's schema says a tuple of three tensors; the bridge may hand back a list
        return tuple(moe_cte_for_training[grid](
            hidden_states, affinities_flat, gate_up, down, position_to_id, block_to_expert,
            block_size,
        ))  # fmt: skip

    def setup_context(ctx, inputs, output):
        hidden, aff, gate_up, down, pos, b2e, block_size = inputs
        _, gate_up_act_T, down_act = output
        ctx.save_for_backward(hidden, aff, gate_up, down, pos, b2e, gate_up_act_T, down_act)
        ctx.block_size = block_size

    def backward(ctx, d_out, _d_gate_up_act, _d_down_act):
        hidden, aff, gate_up, down, pos, b2e, gate_up_act_T, down_act = ctx.saved_tensors
        grid = lnc_from_env()
        d_hidden, d_aff, d_gate_up, d_down = blockwise_mm_bwd[grid](
            hidden, aff, gate_up, down, gate_up_act_T, down_act, pos, b2e,
            d_out.contiguous(), ctx.block_size,
        )  # fmt: skip
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
        expert_affinities.reshape(-1, 1).to(dtype),  # [(T+1)*E, 1], the kernel's layout
        gate_up_proj_weight.to(dtype).contiguous(),
        down_proj_weight.to(dtype).contiguous(),
        token_position_to_id.to(torch.int32),
        block_to_expert.to(torch.int32).reshape(-1, 1),
        block_size,
    )
    return out.to(hidden_states.dtype)
