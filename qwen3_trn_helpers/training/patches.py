"""Every change we make to torchtitan's or transformers' behaviour at run time, in one place.

Each patch is a :class:`Patch`: a context manager that applies one named change and
undoes it on exit, with the condition (device, ranks, versions) under which a run needs
it. The trainer (training/run_scope.py) enters the ones a run needs when it is built and
leaves them when it is closed, so nothing outlives the run that needed it. Two apply to
every run (:data:`RUN_PATCHES`); the others belong to a variant, and training/run_scope.py
says which (``VARIANT_PATCHES``). Each says why it exists and which versions it was
written for, and ``tests/core/training/test_patches.py`` checks that each one still is needed (it
fails once upstream fixes the problem, so the patch can be deleted) and that it works.

Not patches, so not here: swapping attention and MoE experts goes through torchtitan's
own override mechanism (model/attention.py, model/moe_blockwise.py); the CPU device
module torchtitan is pointed at is device code (device.py); switching FSDP to SUM
reductions for gloo is a public FSDP call on the built model (training/run_scope.py).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch

from ..device import CPU_DEVICE_MODULE, Device, as_device
from ..torchtitan_internals import TESTED_TORCHTITAN

#: (the run's device, world_size) -> whether a run needs the patch
Gate = Callable[[Device, int], bool]


class Patch:
    """One named, reversible change to upstream code, and when a run needs it.

    Calling it returns the context manager that applies the change (so
    ``with patches.hf_backend_sdpa(): ...`` works as for a plain ``@contextmanager``);
    :meth:`needed` is its gate: the device and rank count it applies to, and the
    upstream versions it was written for.
    """

    def __init__(self, apply: Callable[[], AbstractContextManager[Any]], gate: Gate) -> None:
        functools.update_wrapper(self, apply)  # name and docstring: help() shows the why
        self.apply = apply
        self.gate = gate
        self.name: str = apply.__name__

    def __call__(self) -> AbstractContextManager[Any]:
        return self.apply()

    def needed(self, device: Device | str, world_size: int) -> bool:
        return self.gate(as_device(device), world_size)

    def __repr__(self) -> str:
        return f"<patch {self.name}>"


def applies_when(gate: Gate) -> Callable[[Callable[[], AbstractContextManager[Any]]], Patch]:
    """Decorator: the context manager below is a :class:`Patch` needed when ``gate`` holds."""
    return lambda apply: Patch(apply, gate)


# --- the device torchtitan trains on ------------------------------------------------


def torchtitan_device_type() -> str:
    """The device torchtitan chose at import: ``_get_available_device_type() or "cuda"``."""
    from torchtitan.tools import utils

    return utils.device_type


def _cpu_but_torchtitan_chose_otherwise(device: Device, world: int) -> bool:
    return device.is_cpu and not as_device(torchtitan_device_type()).is_cpu


@applies_when(_cpu_but_torchtitan_chose_otherwise)
@contextmanager
def torchtitan_on_cpu() -> Iterator[list[str]]:
    """Point torchtitan's module-level ``device_type``/``device_module`` at the CPU.

    Why: torchtitan 0.3.0 picks its device once, at import (tools/utils.py:
    ``_get_available_device_type() or "cuda"``), and several modules copy the two
    names (``from torchtitan.tools.utils import device_type``). On a machine with no
    accelerator it chooses CUDA and dies at ``set_device``; on a Mac it chooses
    ``mps``; and a run asked to use the CPU on a GPU host would train on the GPU. Each
    copy is pointed at the CPU (``device.CPU_DEVICE_MODULE``) for the run and restored
    afterwards. Needed for CPU runs only, and only while torchtitan chose otherwise;
    not on trn2, where torchtitan finds ``neuron`` itself. Yields the modules changed.
    """
    import torchtitan.trainer  # noqa: F401  (imports the modules that copy the names)
    from torchtitan.tools import utils

    chosen_type, chosen_module = utils.device_type, utils.device_module
    changed = _swap_device(chosen_type, chosen_module, "cpu", CPU_DEVICE_MODULE)
    try:
        yield changed
    finally:
        _swap_device("cpu", CPU_DEVICE_MODULE, chosen_type, chosen_module)


def _swap_device(old_type: str, old_module: Any, new_type: str, new_module: Any) -> list[str]:
    changed = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("torchtitan") or module is None:
            continue
        hit = False
        if getattr(module, "device_type", None) == old_type:
            module.device_type, hit = new_type, True
        if getattr(module, "device_module", None) is old_module:
            module.device_module, hit = new_module, True
        if hit:
            changed.append(name)
    return changed


# --- end of run -----------------------------------------------------------------------


def trainer_sleeps_at_end() -> bool:
    """The version gate of :func:`no_end_of_run_sleep` (torchtitan 0.3.0's Trainer.train)."""
    import inspect

    from torchtitan.trainer import Trainer

    return "time.sleep(2)" in inspect.getsource(Trainer.train)


@applies_when(lambda device, world: world == 1 and trainer_sleeps_at_end())
@contextmanager
def no_end_of_run_sleep() -> Iterator[None]:
    """Skip the 2 s sleep at the end of ``Trainer.train`` in a one-rank run.

    Why: torchtitan 0.3.0 sleeps 2 s on rank 0 after the last step "for other ranks to
    complete". With one rank there are none, and a notebook or test that trains a dozen
    short runs waits half a minute for nothing. Multi-rank runs keep the sleep. Only
    ``torchtitan.trainer``'s own name ``time`` is replaced, never the ``time`` module.
    """
    import torchtitan.trainer as trainer_module

    clock = SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    clock.sleep = lambda seconds: None
    with mock.patch.object(trainer_module, "time", clock):
        yield


# --- torchtitan's transformers backend (variant "transformers_v5") ------------------


def hf_rotary_lacks_rope_init_fn() -> bool:
    """The condition for :func:`hf_backend_rope_init` (true with transformers 5.x)."""
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


@applies_when(lambda device, world: hf_rotary_lacks_rope_init_fn())
@contextmanager
def hf_backend_rope_init() -> Iterator[None]:
    """Give HF rotary embeddings real ``inv_freq`` values after torchtitan materialises them.

    Why: torchtitan 0.3.0's transformers backend builds the HF model on the meta device,
    materialises it with ``to_empty()`` (uninitialised memory) and then recomputes
    ``inv_freq`` only through ``module.rope_init_fn``, an attribute transformers 5.x no
    longer keeps. ``inv_freq`` is a non-persistent buffer, so loading a checkpoint does
    not fix it either: RoPE silently breaks, and a pretrained model trains from near
    ln(vocab) (the class of bug in pytorch/torchtitan#3775). We run torchtitan's
    ``init_states`` and then recompute ``inv_freq`` as transformers' ``__init__`` does.
    """
    from ..torchtitan_internals import hf_backend_attention

    cls = hf_backend_attention().model_class
    original = cls.init_states

    def init_states(self, *, buffer_device=None) -> None:
        original(self, buffer_device=buffer_device)
        with torch.no_grad():
            recompute_rotary_inv_freq(self.model)

    with mock.patch.object(cls, "init_states", init_states):
        yield


@applies_when(lambda device, world: not device.is_cuda)
@contextmanager
def hf_backend_sdpa() -> Iterator[None]:
    """Run the transformers backend's attention through SDPA instead of FlexAttention.

    Why: the backend sends HF attention to FlexAttention (registered under its own
    name) with a compiled BlockMask. FlexAttention has no CPU backward and is not what
    the Neuron compiler lowers, so off CUDA (torch 2.14: "FlexAttention does not support
    backward on CPU"; torchtitan 0.3.0) we register transformers' own SDPA attention
    under that name with ``AttentionInterface.register``, HF's documented hook, which
    HF's Qwen3 attention reads through ``ALL_ATTENTION_FUNCTIONS.get_interface``
    (transformers 5.x). Causal attention then passes no mask at all (SDPA's
    ``is_causal``); document-masked attention uses the dense block-causal mask the
    backend already builds for models that cannot take a BlockMask
    (``_build_dense_attention_mask``). Same maths. On exit the name maps to what it
    did before (the backend's own function if no backend config was built yet: each
    one registers it).
    """
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from ..torchtitan_internals import hf_backend_attention

    backend = hf_backend_attention()
    name = backend.implementation_name
    before = ALL_ATTENTION_FUNCTIONS.get(name, backend.module._flex_attention_torchtitan)

    def get_attention_masks(self, positions: torch.Tensor) -> torch.Tensor | None:
        if getattr(self.model.config, "attn_mask_type", "causal") == "block_causal":
            return self._build_dense_attention_mask(positions)
        return None  # no mask: HF's SDPA attention then uses is_causal

    with ExitStack() as stack:
        # every new backend config re-registers the module's _flex_attention_torchtitan
        stack.enter_context(
            mock.patch.object(backend.module, "_flex_attention_torchtitan", sdpa_attention_forward)
        )
        stack.enter_context(
            mock.patch.object(backend.model_class, "get_attention_masks", get_attention_masks)
        )
        AttentionInterface.register(name, sdpa_attention_forward)
        stack.callback(AttentionInterface.register, name, before)
        yield


@applies_when(lambda device, world: True)
@contextmanager
def keep_transformers_init() -> Iterator[None]:
    """Undo, on exit, the transformers-wide init patches torchtitan's backend installs.

    Why: building a transformers-backend model (torchtitan 0.3.0,
    ``HFTransformerModel._patch_hf_llama_like``) replaces
    ``PreTrainedModel._init_weights`` and ``_initialize_weights`` for *every* transformers
    model in the process, and wraps the decoder layer's ``__init__`` again on each build.
    Its replacement does not initialise rotary ``inv_freq`` buffers, so any model loaded
    later with plain ``from_pretrained`` in the same process gets broken RoPE (seen as
    a 0.4-0.5 logit error in the parity check after one transformers_v5 run).
    """
    from transformers import modeling_utils
    from transformers.models.qwen3 import modeling_qwen3
    from transformers.models.qwen3_moe import modeling_qwen3_moe

    pretrained = modeling_utils.PreTrainedModel
    kept = [
        (pretrained, "_init_weights"),
        (pretrained, "_initialize_weights"),
        (modeling_qwen3.Qwen3DecoderLayer, "__init__"),
        (modeling_qwen3_moe.Qwen3MoeDecoderLayer, "__init__"),
    ]
    with ExitStack() as stack:
        for owner, name in kept:
            # "replaced" by its own value: on exit mock puts that value back, whatever
            # the backend wrote there meanwhile
            stack.enter_context(mock.patch.object(owner, name, owner.__dict__[name]))
        yield


# --- torchtitan's Qwen3 decoder (variants "native" and "nki_moe") -------------------


#: torchtitan versions whose Qwen3 parallelisation unties the embedding before FSDP
UNTIES_BEFORE_FSDP = ("0.3.",)


def torchtitan_unties_before_fsdp() -> bool:
    """The version gate of :func:`tie_embedding_before_fsdp` (torchtitan 0.3.x)."""
    from importlib import metadata

    return metadata.version("torchtitan").startswith(UNTIES_BEFORE_FSDP)


def retie_embedding(model: torch.nn.Module) -> bool:
    """``tok_embeddings.weight = lm_head.weight`` where a tied decoder lost its tie.

    Only when both are the same kind of tensor of one shape and layout (TP shards both
    rows-first, ``S(0)``), so the one parameter is valid in both modules; returns
    whether it re-tied.
    """
    embed = getattr(model, "tok_embeddings", None)
    head = getattr(model, "lm_head", None)
    if not getattr(model, "enable_weight_tying", False) or embed is None or head is None:
        return False
    a, b = embed.weight, head.weight
    if a is b or type(a) is not type(b) or a.shape != b.shape:
        return False
    if getattr(a, "placements", None) != getattr(b, "placements", None):
        return False
    embed.weight = b
    return True


@applies_when(lambda device, world: torchtitan_unties_before_fsdp())
@contextmanager
def tie_embedding_before_fsdp() -> Iterator[None]:
    """Tie the embedding to the output layer again before FSDP shards them.

    Why: torchtitan 0.3.0's Qwen3 ties the tables in ``Decoder.__init__``
    (``tok_embeddings.weight = lm_head.weight``), but ``parallelize_qwen3`` first
    calls ``model.parallelize()`` (the default ``spmd_backend="spmd_types"``, at any
    TP degree, one rank included), which re-registers each module's weight as a new
    ``nn.Parameter``, and only then ``apply_fsdp_to_decoder``, which shards
    ``[tok_embeddings, norm, lm_head]`` as one group expecting one shared table. FSDP
    finds two parameters and manages both; ``Decoder.init_states`` re-ties afterwards.
    Gradients still add up, but every step all-gathers and reduce-scatters the
    151,936-row table twice and holds two unsharded copies (Qwen3-4B's table is
    0.78 GB in bf16: 0.19 GB per rank and gather at TP 4). We wrap the
    ``apply_fsdp_to_decoder`` name parallelize_qwen3 calls and re-tie first, as
    ``init_states`` would; same model, same losses.

    Upstream report (torchtitan 0.3.0, torch 2.14)::

        Tied embeddings are sharded as two FSDP parameters (Qwen3, spmd_types)

        # repro.py; torchrun --nproc_per_node 1 repro.py (one GPU)
        from torchtitan.config import ConfigManager
        config = ConfigManager().parse_args(
            ["--module", "qwen3", "--config", "qwen3_debugmodel", "--training.steps", "1"]
        )
        trainer = config.build()  # debugmodel: enable_weight_tying=True
        m = trainer.model_parts[0]
        assert m.tok_embeddings.weight is m.lm_head.weight  # re-tied by init_states
        group = m.lm_head._get_fsdp_state()._fsdp_param_group
        print(sum(p._module_info.module in (m.tok_embeddings, m.lm_head)
                  for p in group.fsdp_params))  # 2; expected 1

        Cause: parallelize_qwen3 calls model.parallelize(parallel_dims) before
        apply_fsdp_to_decoder; Module._spmd_distribute_state registers a new
        nn.Parameter per module, so tok_embeddings.weight is no longer
        lm_head.weight when fully_shard([tok_embeddings, norm, lm_head]) runs, and
        FSDP manages both. Decoder.init_states re-ties after sharding, too late for
        FSDP: the table is all-gathered and reduce-scattered twice a step. Fix:
        re-tie (tok_embeddings.weight = lm_head.weight) after model.parallelize and
        before apply_fsdp_to_decoder.

    (Checked here on a CPU with the tiny presets: tests/core/training/test_patches.py.)
    The transformers backend is not affected by this patch: its
    ``parallelize_hf_transformers`` unties the tables on purpose (a cloned lm_head).
    """
    from ..torchtitan_internals import qwen3_parallelize_module

    module = qwen3_parallelize_module()
    original = module.apply_fsdp_to_decoder

    def apply_fsdp_to_decoder(model: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        retie_embedding(model)
        return original(model, *args, **kwargs)

    with mock.patch.object(module, "apply_fsdp_to_decoder", apply_fsdp_to_decoder):
        yield


def fsdp_table_parameters(model_parts: list[torch.nn.Module]) -> int:
    """FSDP parameters of the vocabulary tables (``tok_embeddings``, ``lm_head``).

    A tied table sharded once is 1; untied tables are 2. Reads FSDP2's parameter
    groups (private torch names: ``_get_fsdp_state``, ``_fsdp_param_group``,
    ``_module_info``); for tests and measurements only.
    """
    from torch.distributed.fsdp import FSDPModule

    tables, groups = [], {}
    for part in model_parts:
        tables += [getattr(part, name, None) for name in ("tok_embeddings", "lm_head")]
        for m in part.modules():
            if isinstance(m, FSDPModule):
                group = m._get_fsdp_state()._fsdp_param_group
                if group is not None:
                    groups[id(group)] = group
    return sum(
        any(p._module_info.module is t for t in tables if t is not None)
        for g in groups.values()
        for p in g.fsdp_params
    )


#: the patches every run gets (where their gates hold); variants add theirs
RUN_PATCHES: tuple[Patch, ...] = (torchtitan_on_cpu, no_end_of_run_sleep)

#: every patch by name, for :func:`disabled` (the notebooks switch one off by name)
PATCHES: dict[str, Patch] = {
    p.name: p
    for p in (
        *RUN_PATCHES,
        hf_backend_rope_init,
        hf_backend_sdpa,
        keep_transformers_init,
        tie_embedding_before_fsdp,
    )
}

DISABLED_ENV = "QWEN3_TRN_DISABLED_PATCHES"


@contextmanager
def disabled(patch: str | Patch) -> Iterator[None]:
    """Leave one patch (or its name) out of the runs started inside, to see what it fixes.

    Recorded in the environment, so runs in child processes (torchrun ranks, trn2's
    isolated notebook helpers) leave it out too.
    """
    name = patch.name if isinstance(patch, Patch) else patch
    if PATCHES.get(name) is None:
        raise KeyError(f"no patch named {name!r}; the patches are {', '.join(PATCHES)}")
    names = [n for n in os.environ.get(DISABLED_ENV, "").split(",") if n]
    with mock.patch.dict(os.environ, {DISABLED_ENV: ",".join([*names, name])}):
        yield


@contextmanager
def run_patches(variant_patches: tuple[Patch, ...], device: Device | str, world_size: int):
    """Everything one run needs, entered together and undone together.

    The run-wide patches and ``variant_patches``, each where its gate holds and it is
    not :func:`disabled`.
    """
    check_torchtitan_version()
    skipped = set(os.environ.get(DISABLED_ENV, "").split(","))
    with ExitStack() as stack:
        for patch in (*RUN_PATCHES, *variant_patches):
            if patch.name not in skipped and patch.needed(device, world_size):
                stack.enter_context(patch())
        yield


def check_torchtitan_version() -> str:
    """The installed torchtitan version; warns when the patches were not tested on it."""
    import warnings
    from importlib import metadata

    version = metadata.version("torchtitan")
    if not version.startswith(TESTED_TORCHTITAN):
        warnings.warn(
            f"qwen3-trn was tested with torchtitan {TESTED_TORCHTITAN[0]}x, found {version}; "
            "its patches may be unnecessary or wrong there",
            stacklevel=2,
        )
    return version
