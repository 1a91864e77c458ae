"""Activation memory per checkpointing mode, measured: ``plan --verify``'s second check.

One torchtitan Qwen3 block at the model's real widths, bf16, on the plan's tokens per
microbatch, runs a real forward and backward per mode (none, selective, full: torchtitan's
own ``FullAC`` / ``SelectiveAC`` wrappers) under ``FakeTensorMode`` -- shapes and
autograd are real, nothing is allocated, so a 4,096-token Qwen3-4B block takes about a
second -- while torch's ``MemTracker`` (torch/distributed/_tools/mem_tracker.py) counts
every storage by category. What the block keeps for its backward is the activation
memory alive after the forward, less the block's output (the next block's input),
with the block input handed over so that only the block's own graph can keep it (as a
checkpoint does). That is compared with ``training.memory.layer_activation_values``.
Dense blocks only: a MoE block's routing is data-dependent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...model.shapes import Qwen3Shape

#: how far a measured block may be from the estimate: the estimate leaves out nothing
#: it knows of; MemTracker rounds each storage up to 512 B (the CUDA allocator's unit)
ACTIVATION_TOLERANCE = 0.02
MODES = ("none", "selective", "full")
MIB = 1024**2


@dataclass(frozen=True)
class ActivationCheck:
    mode: str
    tokens: int
    measured_mib: float  # kept for the backward by one block, MemTracker
    estimated_mib: float  # 2 B x layer_activation_values
    backward_peak_mib: float  # activations + temporaries at the backward's peak

    @property
    def relative_error(self) -> float:
        return abs(self.measured_mib / self.estimated_mib - 1)

    @property
    def agrees(self) -> bool:
        return self.relative_error <= ACTIVATION_TOLERANCE

    def row(self) -> dict[str, Any]:
        return {
            "AC": self.mode,
            "tokens": self.tokens,
            "measured MiB/block": round(self.measured_mib, 1),
            "estimated MiB/block": round(self.estimated_mib, 1),
            "difference": f"{100 * self.relative_error:.2f}%",
            "agrees": self.agrees,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "tokens": self.tokens,
            "measured_mib": self.measured_mib,
            "estimated_mib": self.estimated_mib,
            "backward_peak_mib": self.backward_peak_mib,
            "relative_error": self.relative_error,
            "tolerance": ACTIVATION_TOLERANCE,
            "agrees": self.agrees,
        }


def _block_config(shape: Qwen3Shape):
    """torchtitan's block config for ``shape`` with plain causal SDPA (the trn2 default)."""
    from ...model.attention import causal_sdpa
    from ...model.shapes import native_model_config

    layer = native_model_config(dataclasses.replace(shape, n_layers=1)).layers[0]
    layer.attention.inner_attention = causal_sdpa(layer.attention.inner_attention)
    return layer


def _wrap(block, mode: str):
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    if mode == "none":
        return block
    policy = FullAC(FullAC.Config()) if mode == "full" else SelectiveAC(SelectiveAC.Config())
    return policy._wrap_block(block, base_fqn="layers.0")


def measure_block(shape: Qwen3Shape, tokens: int, mode: str) -> tuple[int, int]:
    """Bytes one block keeps for its backward, and its activations + temporaries at the
    backward's peak, for ``tokens`` tokens (batch 1) under checkpointing ``mode``."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    with FakeTensorMode():
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)  # built in bf16: FSDP's compute dtype
        try:
            block = _wrap(_block_config(shape).build(), mode)
        finally:
            torch.set_default_dtype(default)
        x = torch.randn(1, tokens, shape.dim, dtype=torch.bfloat16, requires_grad=True)
        tracker = MemTracker()
        tracker.track_external(block, x)
        with tracker:
            h = x.clone()  # an activation only the block's graph may keep alive
            out = block(h, None)
            del h
            acts = tracker.get_tracker_snapshot()
            kept = sum(s[_MemRefType.ACT] for s in acts.values())
            kept -= out.untyped_storage().nbytes()
            out.float().pow(2).mean().backward()
            peak = tracker.get_tracker_snapshot("peak")
    peak_bytes = sum(s[_MemRefType.ACT] + s[_MemRefType.TEMP] for s in peak.values())
    return kept, peak_bytes


def check_activations(shape: Qwen3Shape, tokens: int) -> list[ActivationCheck]:
    """Measured against estimated, per checkpointing mode, one dense block."""
    from ...training.memory import layer_activation_values

    checks = []
    for mode in MODES:
        kept, peak = measure_block(shape, tokens, mode)
        # the CPU's SDPA op is not in torchtitan's SelectiveAC save list
        estimate = 2 * layer_activation_values(shape, tokens, mode, attention_saved=False)
        checks.append(ActivationCheck(mode, tokens, kept / MIB, estimate / MIB, peak / MIB))
    return checks
