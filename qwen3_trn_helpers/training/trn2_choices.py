"""Four choices on the default trn2 path that no machine of ours has run, each taken
from what AWS documents for TorchTitan on Trainium, and said in the plan.

1. ``--compile`` trains SimpleFSDP through torchtitan's graph_trainer in its ``jit``
   mode (training/simple_fsdp.py). AWS: "Tutorial: Train Llama and DeepSeek with
   SimpleFSDP on Neuron" (training/torchtitan/tutorials/tutorial-simple-fsdp-training,
   2026-10-15: "Compiler-based sharding on Trainium with the Neuron JIT GraphTrainer
   path"), and "Best practices for TorchNeuron" ("With TorchTitan, use SimpleFSDP for
   torch.compile work"). torchtitan 0.3.0 warns that ``jit`` is deprecated
   (experiments/graph_trainer/compile.py:87-92); AWS's path is kept, the warning said.
2. The SPMD backend: AWS's TorchTitan pages describe every strategy as DTensor and
   ``fully_shard`` over the ``neuron`` process group ("What is TorchTitan Neuron?",
   training/torchtitan/about-torchtitan-neuron), and AWS's fork is torchtitan 0.2.2+
   (support matrix), older than ``parallelism.spmd_backend`` (torchtitan commit
   641b5f6, 2026-06-06) and its ``spmd_types`` default (5ab3a0f, 2026-08-18). So on trn2
   a run takes ``full_dtensor`` ("the existing full DTensor path", torchtitan
   config/configs.py:163-172); ``spmd_types`` (upstream's default) is opt-in with
   ``--spmd-backend spmd_types``. Elsewhere upstream's default stays, and so does the
   ``transformers_v5`` variant everywhere: torchtitan's transformers backend takes no
   other (experiments/transformers_modeling_backend/parallelize.py:115-120).
3. and 4. The MoE experts of the ``nki_moe`` variant on trn2: nki-library's ``moe_cte``
   forward and its backward ``blockwise_mm_bwd``, which AWS's API reference marks
   "[Experimental]" (nki/library/api/blockwise-mm-backward), with the kernels' numerics
   against the PyTorch reference checked only by the smoke ladder's ``nki_moe_kernel``
   rung. AWS's TorchTitan tutorial runs MoE layers "on NKI kernels on Neuron" (the
   SimpleFSDP tutorial's DeepSeek-V3) and ships no other NKI MoE backward, so the
   variant keeps them; torchtitan's own experts (``--moe-impl grouped_mm``) are the
   opt-in that runs no NKI kernel. The plan says which a run takes.

The ladder's smoke.json says which rung exercised each (ops/smoke/ladder.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..device import Device
    from ..model.variants import Variant

#: what ``--spmd-backend auto`` (the default) takes on trn2 and elsewhere
TRN2_SPMD_BACKEND = "full_dtensor"
UPSTREAM_SPMD_BACKEND = "spmd_types"

#: each choice: (name, the rungs of the smoke ladder that run it)
CHOICES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("compiled SimpleFSDP through graph_trainer's jit mode", ("compile",)),
    ("the SPMD backend (full_dtensor on trn2; spmd_types opt-in)",
     ("spmd_backends", "tiny_native_2ranks")),
    ("nkilib's experimental MoE backward (blockwise_mm_bwd)", ("nki_moe_kernel",)),
    ("the NKI MoE kernels' numerics against the PyTorch reference", ("nki_moe_kernel",)),
)  # fmt: skip


def default_spmd_backend(device: Device, variant: Variant | None = None) -> str:
    """The SPMD backend a run takes unless it names one (choice 2 above)."""
    from ..model.variants import TransformersV5

    if isinstance(variant, TransformersV5):  # its torchtitan backend takes no other
        return UPSTREAM_SPMD_BACKEND
    return TRN2_SPMD_BACKEND if device.is_trn2 else UPSTREAM_SPMD_BACKEND


def plan_lines(plan: Any) -> dict[str, str]:
    """The choices a trn2 plan makes (a training/plan.py ``Plan``, which imports this
    module), as its summary shows them (nothing elsewhere)."""
    if not plan.device.is_trn2:
        return {}
    lines = {"spmd backend": plan.spmd_backend}
    if plan.spec.compile:
        lines["compile"] = "SimpleFSDP, graph_trainer jit (AWS's documented path)"
    if plan.shape.is_moe:
        lines["MoE experts"] = (
            "NKI moe_cte + experimental blockwise_mm_bwd where the shape allows"
            if plan.spec.moe_impl == "blockwise"
            else "torchtitan grouped_mm (no NKI kernel)"
        )
    return lines
