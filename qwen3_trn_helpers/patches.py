"""Every change we make to torchtitan's behaviour at run time, in one place.

Each patch says why it exists, which versions it was written for, is idempotent, and is
applied only when its condition holds. ``tests/test_patches.py`` checks each one works
and fails loudly once upstream no longer needs it, so it can be deleted.

Attention on CPU is not a patch: it is a backend chosen in the model config
(:mod:`qwen3_trn_helpers.attention`).
"""

from __future__ import annotations

import platform
import resource
import sys
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch

#: torchtitan releases the patches below were written against and tested with.
TESTED_TORCHTITAN = ("0.3.",)


class CpuDeviceModule:
    """The slice of the ``torch.cuda`` API torchtitan calls, answered for the host CPU.

    Why: torchtitan 0.3.0 picks ``_get_available_device_type() or "cuda"``
    (tools/utils.py), so on a machine with no accelerator it chooses CUDA and dies at
    ``set_device``. ``torch.cpu`` lacks the memory-statistics calls its metrics make.
    Memory figures are the process's peak resident set size (``ru_maxrss``), which
    cannot be reset, so "peak since last step" reads as "peak so far" on CPU.
    """

    set_device = staticmethod(torch.cpu.set_device)
    device_count = staticmethod(torch.cpu.device_count)
    is_available = staticmethod(lambda: True)
    synchronize = staticmethod(lambda *a, **k: None)
    empty_cache = staticmethod(lambda: None)
    reset_peak_memory_stats = staticmethod(lambda *a, **k: None)

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return f"cpu ({platform.processor() or platform.machine()})"

    @staticmethod
    def get_device_properties(device: Any = None) -> SimpleNamespace:
        import os

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return SimpleNamespace(name="cpu", total_memory=total)

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return {
            "active_bytes.all.peak": peak,
            "reserved_bytes.all.peak": peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }


CPU_DEVICE_MODULE = CpuDeviceModule()


def torchtitan_picks_cuda_without_gpu() -> bool:
    """The condition for :func:`patch_cpu_device`: torchtitan chose cuda, no GPU exists."""
    from torchtitan.tools import utils

    return not torch.cuda.is_available() and utils.get_device_info()[0] == "cuda"


def patch_cpu_device() -> list[str]:
    """Point torchtitan's module-level ``device_type``/``device_module`` at the CPU.

    torchtitan copies these two names into several modules at import time
    (``from torchtitan.tools.utils import device_type``), so each copy is replaced.
    Call again after importing more torchtitan modules; returns the modules changed.
    """
    import torchtitan.tools.utils  # noqa: F401  (makes sure the globals exist)

    if torch.cuda.is_available():
        return []
    changed = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("torchtitan") or module is None:
            continue
        if getattr(module, "device_type", None) == "cuda":
            module.device_type = "cpu"
            changed.append(name)
        if getattr(module, "device_module", None) is torch.cuda:
            module.device_module = CPU_DEVICE_MODULE
            if name not in changed:
                changed.append(name)
    return changed


def check_torchtitan_version() -> str:
    """The installed torchtitan version; warns when the patches were not tested on it."""
    import warnings
    from importlib import metadata

    version = metadata.version("torchtitan")
    if not version.startswith(TESTED_TORCHTITAN):
        warnings.warn(
            f"qwen3-trn was tested with torchtitan {TESTED_TORCHTITAN}, found {version}; "
            "its CPU patches may be unnecessary or wrong there",
            stacklevel=2,
        )
    return version


def apply_cpu_patches() -> list[str]:
    """All patches the CPU path needs (idempotent; does nothing where a GPU exists)."""
    check_torchtitan_version()
    import torchtitan.trainer  # noqa: F401  (imports the modules that copy device_type)

    return patch_cpu_device()


# --- torchtitan's transformers backend (variant "transformers_v5") ----------------------

_PATCHED = "_qwen3_trn_patched"


def hf_rotary_lacks_rope_init_fn() -> bool:
    """The condition for :func:`patch_hf_backend_rope_init` (true with transformers 5.x)."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    cfg = Qwen3Config(hidden_size=8, num_attention_heads=2, num_key_value_heads=2, head_dim=4)
    return not hasattr(Qwen3RotaryEmbedding(cfg), "rope_init_fn")


def recompute_rotary_inv_freq(model: torch.nn.Module) -> int:
    """Recompute every HF rotary module's ``inv_freq`` the way its ``__init__`` does."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    count = 0
    for module in model.modules():
        if not hasattr(module, "inv_freq") or not hasattr(module, "rope_type"):
            continue
        if module.rope_type == "default":
            inv_freq, scaling = module.compute_default_rope_parameters(module.config)
        else:
            inv_freq, scaling = ROPE_INIT_FUNCTIONS[module.rope_type](module.config)
        device = module.inv_freq.device
        module.inv_freq.copy_(inv_freq.to(device=device, dtype=module.inv_freq.dtype))
        if hasattr(module, "original_inv_freq"):
            module.original_inv_freq.copy_(module.inv_freq)
        module.attention_scaling = scaling
        count += 1
    return count


def patch_hf_backend_rope_init() -> bool:
    """Give HF rotary embeddings real ``inv_freq`` values after torchtitan materialises them.

    Why: torchtitan 0.3.0's transformers backend builds the HF model on the meta device,
    materialises it with ``to_empty()`` (uninitialised memory) and then recomputes
    ``inv_freq`` only through ``module.rope_init_fn``, an attribute transformers 5.x no
    longer keeps. ``inv_freq`` is a non-persistent buffer, so loading a checkpoint does
    not fix it either: RoPE silently breaks (zeros or garbage), and a pretrained model
    trains from near ln(vocab) (the class of bug in pytorch/torchtitan#3775). We run
    torchtitan's ``init_states`` and then recompute ``inv_freq`` as transformers'
    ``__init__`` does. Returns False when already applied.
    """
    from torchtitan.experiments.transformers_modeling_backend.model import HFTransformerModel

    if getattr(HFTransformerModel.init_states, _PATCHED, False):
        return False
    original = HFTransformerModel.init_states

    def init_states(self, *, buffer_device=None) -> None:
        original(self, buffer_device=buffer_device)
        with torch.no_grad():
            recompute_rotary_inv_freq(self.model)

    setattr(init_states, _PATCHED, True)
    init_states.__wrapped__ = original  # type: ignore[attr-defined]
    HFTransformerModel.init_states = init_states
    return True


def patch_hf_backend_dense_attention() -> bool:
    """Run the transformers backend's attention through SDPA with a dense mask.

    Why: the backend sends HF attention to FlexAttention (registered under the name
    ``flex_torchtitan``) with a compiled BlockMask. FlexAttention has no CPU backward
    and is not what the Neuron compiler lowers, so off CUDA we register transformers' own
    SDPA attention under that name (``AttentionInterface.register``, HF's documented
    hook) and use the dense block-causal mask the backend already builds for models
    that cannot take a BlockMask (``_build_dense_attention_mask``). Same maths. Every new
    backend config re-registers the module's ``_flex_attention_torchtitan``, so that
    name is pointed at SDPA too.
    """
    from torchtitan.experiments.transformers_modeling_backend import model as backend
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import AttentionInterface

    cls = backend.HFTransformerModel
    if getattr(cls.get_attention_masks, _PATCHED, False):
        return False
    backend._flex_attention_torchtitan = sdpa_attention_forward
    AttentionInterface.register(backend._ATTN_IMPLEMENTATION, sdpa_attention_forward)

    def get_attention_masks(self, positions: torch.Tensor) -> torch.Tensor:
        return self._build_dense_attention_mask(positions)

    setattr(get_attention_masks, _PATCHED, True)
    cls.get_attention_masks = get_attention_masks
    return True


def apply_variant_patches(variant: str, device_type: str) -> list[str]:
    """The patches a variant needs on a device; returns the names of those applied now."""
    applied = []
    if device_type == "cpu":
        apply_cpu_patches()
    if variant == "transformers_v5":
        if hf_rotary_lacks_rope_init_fn() and patch_hf_backend_rope_init():
            applied.append("hf_backend_rope_init")
        if device_type != "cuda" and patch_hf_backend_dense_attention():
            applied.append("hf_backend_dense_attention")
        if device_type == "cpu":
            patch_cpu_device()  # the backend's modules copied torchtitan's device globals
    return applied


# --- multi-rank on CPU --------------------------------------------------------------


def force_sum_reduction_for_gloo(model_parts: list[torch.nn.Module]) -> int:
    """Make FSDP2 reduce gradients with SUM, the only reduction gloo offers.

    Why: torchtitan normalises the loss by the global token count and so sets FSDP's
    gradient divide factor to 1; FSDP2 then reduce-scatters with
    ``ReduceOp.PREMUL_SUM(1.0)``, which NCCL (and Neuron's backend) implement and gloo
    does not ("Cannot use ReduceOp.PREMUL_SUM with Gloo"). FSDP2's public
    ``set_force_sum_reduction_for_comms`` switches to SUM followed by the same (x1)
    scaling: identical gradients. Only for CPU runs with more than one rank.
    Returns the number of FSDP modules changed.
    """
    from torch.distributed.fsdp import FSDPModule

    count = 0
    for part in model_parts:
        for module in part.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)
                count += 1
    return count


@contextmanager
def keep_transformers_init_global():
    """Undo, on exit, the transformers-wide init patches torchtitan's backend installs.

    Why: building a transformers-backend model (torchtitan 0.3.0,
    ``HFTransformerModel._patch_hf_llama_like``) replaces
    ``PreTrainedModel._init_weights`` and ``_initialize_weights`` for *every* transformers
    model in the process, and wraps the decoder layer's ``__init__`` again on each build.
    Its replacement does not initialise rotary ``inv_freq`` buffers, so any model loaded
    later with plain ``from_pretrained`` in the same process gets broken RoPE (seen as
    a 0.4-0.5 logit error in our parity check after one transformers_v5 run). The
    backend needs the patches only while the Trainer builds and initialises its model,
    so we restore the originals once that is done.
    """
    from transformers import modeling_utils
    from transformers.models.qwen3 import modeling_qwen3
    from transformers.models.qwen3_moe import modeling_qwen3_moe

    pretrained = modeling_utils.PreTrainedModel
    saved = [
        (pretrained, "_init_weights", pretrained.__dict__["_init_weights"]),
        (pretrained, "_initialize_weights", pretrained.__dict__["_initialize_weights"]),
    ]
    for module, name in (
        (modeling_qwen3, "Qwen3DecoderLayer"),
        (modeling_qwen3_moe, "Qwen3MoeDecoderLayer"),
    ):
        cls = getattr(module, name)
        saved.append((cls, "__init__", cls.__dict__["__init__"]))
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
