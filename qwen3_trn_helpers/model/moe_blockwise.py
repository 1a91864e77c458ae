"""The blockwise, dropless MoE expert computation that the NKI MoE kernels implement.

How it works (the same steps nki-library's ``moe_cte`` kernel expects its caller to do):

1. Every (token, expert) pair the router picked is placed in a *block* of ``B`` slots
   that belongs to a single expert. Each expert gets ``ceil(count / B)`` blocks, so no
   token is ever dropped; unused slots hold a padding token (id ``T``, an all-zero row).
   The number of blocks ``N`` is fixed from ``T``, ``K``, ``E`` and ``B`` alone (spare
   blocks go to the last expert), so the kernel compiles once for every routing.
2. ``token_position_to_id`` [N*B] says which token sits in each slot; ``block_to_expert``
   [N] which expert owns each block.
3. Per block: gate/up projection, SiLU(gate) * up, down projection: dense matmuls of a
   fixed ``B x H`` tile, which is what a systolic array wants. Outputs are scaled by the
   routing weight after the down projection (POST_SCALE) and accumulated per token
   (top-k > 1 sends each token to K blocks).

:func:`blockwise_experts_reference` is that algorithm in PyTorch, with autograd; it runs
everywhere. On Trainium :mod:`qwen3_trn_helpers.model.nki_moe` runs the NKI kernels instead.
:class:`BlockwiseRoutedExperts` plugs either into torchtitan's Qwen3 MoE in place of its
``RoutedExperts`` (token dispatcher + ``torch._grouped_mm``), keeping the parameters and
their names, so torchtitan's init, checkpoints and HF state-dict adapter are unchanged.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torchtitan.config.override import derive, override
from torchtitan.models.common.moe import RoutedExperts

from ..device import Device, as_device
from ..trn2 import lnc_from_env

BACKENDS = ("auto", "reference", "nki")


def kernel_rejects(hidden: int, intermediate: int, block_size: int, lnc: int) -> str | None:
    """Why nki-library's MoE kernels cannot take this shape, or None when they can.

    The documented constraints (nki-library ``moe_cte`` shard-on-I forward and the
    experimental ``blockwise_mm_bwd`` backward, both tested at LNC 2): the block size a
    multiple of 256 for the forward and one of 128/256/512/1024 for the backward; H a
    multiple of 512 in [512, 8192]; I a multiple of 16; and, with the work split over
    the ``lnc`` physical cores of a logical core, H/lnc and I/lnc multiples of 32.
    Qwen3-30B-A3B (H 2048, I 768, B 256) passes; the tiny CPU preset (H 128) does not.
    """
    if block_size not in (256, 512, 1024):
        return f"block size {block_size} is not 256, 512 or 1024"
    if not (512 <= hidden <= 8192 and hidden % 512 == 0):
        return f"H={hidden} is not a multiple of 512 in [512, 8192]"
    if intermediate % 16:
        return f"I={intermediate} is not a multiple of 16"
    for name, size in (("H", hidden), ("I", intermediate)):
        if size % lnc or (size // lnc) % 32:
            return f"{name}/{lnc}={size / lnc:g} is not a multiple of 32 (LNC {lnc})"
    return None


def select_backend(
    requested: str, device: Device | str, hidden: int, intermediate: int, block_size: int
) -> tuple[str, str | None]:
    """("nki" or "reference", the notice to show when "auto" could not use the kernels)."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {requested!r}")
    if requested != "auto":
        return requested, None
    if not as_device(device).is_trn2:  # (the kernels are NeuronCore code)
        return "reference", None
    reason = kernel_rejects(hidden, intermediate, block_size, lnc_from_env())
    if reason is None:
        return "nki", None
    return "reference", (
        f"nki_moe: {reason} (nki-library's MoE kernel constraints), so the experts run "
        "on the PyTorch reference of the same algorithm"
    )


def num_blocks(num_tokens: int, top_k: int, num_experts: int, block_size: int) -> int:
    """Blocks needed for *any* routing of ``num_tokens * top_k`` pairs, dropless.

    Each expert wastes at most ``B - 1`` slots, so ``ceil((T*K - (E-1)) / B) + E - 1``
    blocks always suffice (nki-library's and neuronx-distributed's formula), capped at
    one block per pair.
    """
    pairs = num_tokens * top_k
    n = math.ceil(max(pairs - (num_experts - 1), 0) / block_size) + num_experts - 1
    return max(1, min(n, pairs))


def blockwise_mapping(
    expert_ids_TK: torch.Tensor, num_experts: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_position_to_id [N*B], block_to_expert [N]) for a routing [T, K].

    Tokens keep ascending order within an expert; padding slots hold ``T``.
    """
    T, K = expert_ids_TK.shape
    E, B = num_experts, block_size
    device = expert_ids_TK.device
    n_blocks = num_blocks(T, K, E, B)
    mask_TE = torch.zeros(T, E, dtype=torch.int64, device=device)
    mask_TE.scatter_(1, expert_ids_TK.long(), 1)
    counts_E = mask_TE.sum(0)
    blocks_E = (counts_E + B - 1) // B
    # Every size below is static (n_blocks, T, E, B), and nothing reads a tensor's value
    # back into Python, so torch.compile captures the mapping as one graph (no
    # data-dependent shapes, no boolean indexing).
    if not torch.compiler.is_compiling():  # a Python check of a value: eager only
        needed = int(blocks_E.sum())
        if needed > n_blocks:  # cannot happen for a valid routing; guards the formula
            raise RuntimeError(f"routing needs {needed} blocks, only {n_blocks}")
    blocks_E[-1] += n_blocks - blocks_E.sum()  # the spare blocks go to the last expert
    block_to_expert = torch.repeat_interleave(
        torch.arange(E, device=device), blocks_E, output_size=n_blocks
    )
    first_slot_E = (torch.cumsum(blocks_E, 0) - blocks_E) * B
    rank_TE = torch.cumsum(mask_TE, 0) - 1  # position of the token within its expert
    slot_TE = first_slot_E[None, :] + rank_TE
    picked = mask_TE.bool()
    token_ids = torch.arange(T, device=device)[:, None].expand(T, E)
    # pairs not routed write to one extra slot past the end, dropped afterwards
    slots = torch.where(picked, slot_TE, n_blocks * B).reshape(-1)
    position_to_id = torch.full((n_blocks * B + 1,), T, dtype=torch.int64, device=device)
    position_to_id = position_to_id.scatter(0, slots, token_ids.reshape(-1))
    position_to_id = position_to_id[:-1]
    return position_to_id, block_to_expert


def blockwise_experts_reference(
    hidden_states: torch.Tensor,  # [T+1, H], last row zeros (the padding token)
    expert_affinities: torch.Tensor,  # [T+1, E], routing weight, 0 where not routed
    gate_up_proj_weight: torch.Tensor,  # [E, H, 2, I]: gate at [:, :, 0], up at [:, :, 1]
    down_proj_weight: torch.Tensor,  # [E, I, H]
    token_position_to_id: torch.Tensor,  # [N*B]
    block_to_expert: torch.Tensor,  # [N]
    block_size: int,
    compute_dtype: torch.dtype | None = torch.bfloat16,
) -> torch.Tensor:
    """The kernel's maths in PyTorch (same tensor layouts as ``moe_cte``); returns [T+1, H].

    ``compute_dtype`` mirrors the kernel's (bf16 by default, like torchtitan's grouped
    experts); ``None`` computes in the inputs' dtype.
    """
    n_blocks = block_to_expert.shape[0]
    H = hidden_states.shape[1]
    cd = compute_dtype or hidden_states.dtype
    x_NBH = hidden_states[token_position_to_id].view(n_blocks, block_size, H).to(cd)
    w_gu = gate_up_proj_weight.to(cd)[block_to_expert]  # [N, H, 2, I]
    gate = torch.bmm(x_NBH, w_gu[:, :, 0, :])
    up = torch.bmm(x_NBH, w_gu[:, :, 1, :])
    act = F.silu(gate) * up  # [N, B, I]
    y_NBH = torch.bmm(act, down_proj_weight.to(cd)[block_to_expert])
    slot_expert = block_to_expert.repeat_interleave(block_size)
    scale = expert_affinities[token_position_to_id, slot_expert]  # POST_SCALE
    y = (y_NBH.reshape(-1, H).float() * scale.float()[:, None]).to(hidden_states.dtype)
    out = torch.zeros_like(hidden_states)
    return out.index_add(0, token_position_to_id, y)


def kernel_weights(
    w1_EFD: torch.Tensor, w2_EDF: torch.Tensor, w3_EFD: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """torchtitan's expert weights -> the kernel's [E,H,2,I] gate_up and [E,I,H] down."""
    # Stacked first, transposed after: the same values and layout as stacking the
    # transposes, but inductor's CPU kernel for a cat/stack of transposed bf16 inputs
    # (torch 2.14, AVX-512: the 32x32 bf16 transpose tile inside a cat) writes wrong
    # values, which made compiled bf16 blockwise blocks give NaN losses.
    gate_up = torch.stack((w1_EFD, w3_EFD), dim=1).permute(0, 3, 1, 2).contiguous()
    return gate_up, w2_EDF.transpose(1, 2)


class BlockwiseRoutedExperts(RoutedExperts):
    """torchtitan's ``RoutedExperts`` computed blockwise (NKI on Trainium, PyTorch elsewhere).

    Expert parallelism is not implemented here: experts run on every rank (EP = 1).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(RoutedExperts.Config):
        block_size: int = 128
        # "reference", "nki", or "auto": the kernels on a neuron device when the shape
        # meets their constraints (select_backend), else the reference
        backend: str = "auto"

    def __init__(self, config: Config):
        super().__init__(config)
        if config.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {config.backend!r}")
        self.block_size = config.block_size
        self.backend = config.backend
        self.num_experts = config.inner_experts.num_experts
        self._resolved: str | None = None  # decided at the first forward (device known)

    def _weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        e = self.inner_experts
        ws = (e.w1_EFD, e.w2_EDF, e.w3_EFD)
        return tuple(w.to_local() if isinstance(w, DTensor) else w for w in ws)

    def forward(
        self,
        x_BLD: torch.Tensor,
        topk_scores_BLK: torch.Tensor,
        topk_expert_ids_BLK: torch.Tensor,
        num_local_tokens_per_expert_E: torch.Tensor,
    ) -> torch.Tensor:
        B, L, D = x_BLD.shape
        T, K = B * L, topk_expert_ids_BLK.shape[-1]
        hidden = torch.cat([x_BLD.reshape(T, D), x_BLD.new_zeros(1, D)])
        ids_TK = topk_expert_ids_BLK.reshape(T, K)
        affinities = torch.zeros(
            T + 1, self.num_experts, device=x_BLD.device, dtype=topk_scores_BLK.dtype
        )
        affinities = affinities.scatter(1, ids_TK, topk_scores_BLK.reshape(T, K))
        position_to_id, block_to_expert = blockwise_mapping(
            ids_TK, self.num_experts, self.block_size
        )
        w1, w2, w3 = self._weights()
        gate_up, down = kernel_weights(w1, w2, w3)
        resolved = self._resolved
        if resolved is None:
            resolved, notice = select_backend(
                self.backend, x_BLD.device.type, D, w1.shape[1], self.block_size
            )
            # Recorded and said in eager mode only: inside a compiled block, state kept on
            # the module and a warning are side effects for dynamo (a graph break, an
            # error under torchtitan's fullgraph=True); the choice itself is pure.
            if not torch.compiler.is_compiling():
                self._resolved = resolved
                if notice:
                    warnings.warn(notice, stacklevel=2)
        if resolved == "nki":
            from .nki_moe import blockwise_experts_nki

            out = blockwise_experts_nki(
                hidden, affinities, gate_up, down, position_to_id, block_to_expert, self.block_size
            )
        else:
            out = blockwise_experts_reference(
                hidden, affinities, gate_up, down, position_to_id, block_to_expert, self.block_size
            )
        return out[:T].view(B, L, D)


@override(
    target=RoutedExperts.Config,
    exact=True,
    description="dropless blockwise experts (nki-library's MoE kernel algorithm)",
)
def blockwise_experts(
    config: RoutedExperts.Config, block_size: int = 128, backend: str = "auto"
) -> BlockwiseRoutedExperts.Config:
    """torchtitan's routed experts computed blockwise; same parameters and names."""
    return derive(config, BlockwiseRoutedExperts.Config, block_size=block_size, backend=backend)


#: the override target a trainer config lists to select blockwise experts
OVERRIDE = f"{__name__}.blockwise_experts"
