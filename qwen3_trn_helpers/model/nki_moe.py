"""Trainium only: the blockwise MoE experts on nki-library's NKI kernels.

CI cannot run the kernels (there is no Trainium machine in CI). The launch itself (what
is handed to torch-neuronx's NKI wrapper: the grid and every argument) is plain Python
and tested on a CPU with a recording stand-in for the wrapper
(``tests/core/base/test_trn2.py::test_nki_launch_*``); the kernels' results are checked on trn2 by
the smoke ladder's ``nki_moe_kernel`` rung (``qwen3-trn smoke``), which compares them
with the PyTorch reference, forward and gradients.

- forward: ``moe_cte`` with ``MoECTESpec(shard_on_i, ShardOnIConfig(checkpoint_activation
  =True))`` returns the output and the two activation checkpoints the backward needs;
- backward: ``blockwise_mm_bwd`` (an ``@nki.jit`` kernel in nki-library's
  ``experimental/moe/bwd``) returns d_hidden, d_affinities, d_gate_up, d_down;
- registration: ``torch_neuronx.nki_op`` makes the pair one PyTorch custom op, and the
  op's ``register_autograd`` attaches the backward (Neuron docs, "How to work with NKI
  kernels from torch-neuronx", 2.33).

How a kernel is launched from torch on the native ``neuron`` device, as vllm-neuron's
``functional/moe/moe_cte.py`` and torch-neuronx's own NKI tests do it: the kernel is
wrapped first, ``torch_neuronx.nki_hop.wrap_nki(kernel)``, and the wrapped callable is
launched with the grid, ``wrapped[grid](...)`` ("grid goes on the wrapper, not on the
kernel"). Calling the ``@nki.jit`` object itself with torch tensors is not that path.
Three rules, each a defect if broken:

- the grid: a kernel launched without one runs on one physical core; nki.jit's docs say
  the LNC degree given at the call site must match ``NEURON_LOGICAL_NC_CONFIG``. We
  launch with the logical core's size as a one-dimensional grid tuple,
  ``(NEURON_LOGICAL_NC_CONFIG,)`` (trn2 default 2; vllm-neuron writes ``[2]``);
- hashable arguments: the bridge keys its compiled-kernel cache on every non-tensor
  argument, and ``MoECTESpec`` (a mutable dataclass) is not hashable, so the spec is
  built inside a trace-mode kernel (``nki.jit(mode="trace")``) from flat scalars, as
  vllm-neuron's ``_torch_compatible_moe_cte_kernel`` does; :func:`launch` refuses any
  other non-tensor argument that cannot be hashed;
- one dtype: the kernels want every float tensor in the same dtype (bf16 here).

The tensor layouts are exactly those of
:func:`qwen3_trn_helpers.model.moe_blockwise.blockwise_experts_reference`, which tests
prove equal to torchtitan's own MoE; shapes the kernels reject never get here
(``moe_blockwise.select_backend``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from ..errors import ConfigError
from ..trn2 import lnc_from_env

_OP = None


def kernel_grid() -> tuple[int]:
    """The launch grid: one program per physical core of the logical core."""
    return (lnc_from_env(),)


def launch(wrap: Callable[[Any], Any], kernel: Any, *args: Any) -> Any:
    """``wrap(kernel)[kernel_grid()](*args)``, after checking what the bridge can take.

    ``wrap`` is ``torch_neuronx.nki_hop.wrap_nki`` on trn2 (a recording stand-in in the
    CPU tests). Every argument must be a tensor or a hashable scalar: the bridge hashes
    non-tensor arguments to key its kernel cache, and an unhashable one fails only
    there, deep in a Neuron stack trace.
    """
    for i, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            continue
        if not isinstance(arg, Hashable) or isinstance(arg, list | dict | set):
            raise ConfigError(
                f"NKI kernel argument {i} is a {type(arg).__name__}, which torch-neuronx's "
                "NKI bridge cannot hash: pass tensors and flat scalars, and build config "
                "objects inside the trace-mode kernel"
            )
        try:
            hash(arg)
        except TypeError:
            raise ConfigError(
                f"NKI kernel argument {i} ({type(arg).__name__}) is not hashable"
            ) from None
    return wrap(kernel)[kernel_grid()](*args)


def kernel_inputs(
    hidden_states: torch.Tensor,
    expert_affinities: torch.Tensor,
    gate_up_proj_weight: torch.Tensor,
    down_proj_weight: torch.Tensor,
    token_position_to_id: torch.Tensor,
    block_to_expert: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """The reference's tensors in the kernels' dtypes and layouts (bf16 floats, int32
    indices, affinities flattened to [(T+1)*E, 1], block_to_expert [N, 1])."""
    dtype = torch.bfloat16  # the kernels want one float dtype for every tensor
    return (
        hidden_states.to(dtype),
        expert_affinities.reshape(-1, 1).to(dtype),
        gate_up_proj_weight.to(dtype).contiguous(),
        down_proj_weight.to(dtype).contiguous(),
        token_position_to_id.to(torch.int32),
        block_to_expert.to(torch.int32).reshape(-1, 1),
    )


def launch_forward(
    wrap: Callable[[Any], Any], kernel: Any, inputs: tuple[torch.Tensor, ...], block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """moe_cte: (output, gate_up activations^T, down activations) for the backward."""
    # the op's schema says a tuple of three tensors; the bridge may hand back a list
    return tuple(launch(wrap, kernel, *inputs, int(block_size)))


def launch_backward(
    wrap: Callable[[Any], Any],
    kernel: Any,
    saved: tuple[torch.Tensor, ...],
    d_out: torch.Tensor,
    block_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """blockwise_mm_bwd: (d_hidden, d_affinities, d_gate_up, d_down).

    ``saved`` is what the forward kept: hidden, affinities, gate_up, down, positions,
    block_to_expert, gate_up activations^T, down activations; the kernel takes them in
    nki-library's order (activations before the index tensors).
    """
    hidden, aff, gate_up, down, pos, b2e, gate_up_act_T, down_act = saved
    return tuple(launch(
        wrap, kernel, hidden, aff, gate_up, down, gate_up_act_T, down_act, pos, b2e,
        d_out.contiguous(), int(block_size),
    ))  # fmt: skip


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
    from torch_neuronx.nki_hop import wrap_nki

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
        inputs = (hidden_states, affinities_flat, gate_up, down, position_to_id,
                  block_to_expert)  # fmt: skip
        return launch_forward(wrap_nki, moe_cte_for_training, inputs, block_size)

    def setup_context(ctx, inputs, output):
        hidden, aff, gate_up, down, pos, b2e, block_size = inputs
        _, gate_up_act_T, down_act = output
        ctx.save_for_backward(hidden, aff, gate_up, down, pos, b2e, gate_up_act_T, down_act)
        ctx.block_size = block_size

    def backward(ctx, d_out, _d_gate_up_act, _d_down_act):
        grads = launch_backward(
            wrap_nki, blockwise_mm_bwd, ctx.saved_tensors, d_out, ctx.block_size
        )
        return (*grads, None, None, None)

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
    inputs = kernel_inputs(
        hidden_states, expert_affinities, gate_up_proj_weight, down_proj_weight,
        token_position_to_id, block_to_expert,
    )  # fmt: skip
    out, _, _ = op(*inputs, block_size)
    return out.to(hidden_states.dtype)
