"""Every private torchtitan name this package uses, imported here and nowhere else.

torchtitan 0.3.0 builds its Qwen3 flavors from private helpers (``_build_qwen3_layers``
and friends) and keeps its transformers backend's attention plumbing private too. We
need both: the first to build Qwen3 configs of *our* shapes exactly as torchtitan
builds its own flavors, the second for two named patches (training/patches.py). Each
accessor imports on call, so importing this module costs nothing, and a torchtitan
upgrade that renames one of these breaks here, in one place, with a clear message.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

TESTED_TORCHTITAN = ("0.3.",)


def _missing(what: str, error: Exception) -> ImportError:
    from importlib import metadata

    return ImportError(
        f"torchtitan {metadata.version('torchtitan')} lacks {what} ({error}); qwen3-trn "
        f"was written against torchtitan {TESTED_TORCHTITAN[0]}x: install torchtitan==0.3.0"
    )


def qwen3_builders() -> SimpleNamespace:
    """The helpers torchtitan.models.qwen3 uses to build its own flavor configs."""
    try:
        from torchtitan.models.qwen3 import (
            _EMBEDDING_INIT,
            _EMBEDDING_SKIP_INIT,
            _LINEAR_INIT,
            _build_qwen3_layers,
            _build_qwen3_moe_layers,
            _qwen3_norm,
        )
    except ImportError as e:
        raise _missing("the Qwen3 config builders", e) from e
    return SimpleNamespace(
        embedding_init=_EMBEDDING_INIT,
        embedding_skip_init=_EMBEDDING_SKIP_INIT,
        linear_init=_LINEAR_INIT,
        dense_layers=_build_qwen3_layers,
        moe_layers=_build_qwen3_moe_layers,
        norm=_qwen3_norm,
    )


def hf_backend_attention() -> SimpleNamespace:
    """The transformers backend's attention registration (its model module)."""
    try:
        from torchtitan.experiments.transformers_modeling_backend import model
    except ImportError as e:
        raise _missing("the transformers modeling backend", e) from e
    for name in ("_ATTN_IMPLEMENTATION", "_flex_attention_torchtitan"):
        if not hasattr(model, name):
            raise _missing(f"transformers_modeling_backend.model.{name}", AttributeError(name))
    if not hasattr(model.HFTransformerModel, "_build_dense_attention_mask"):
        missing = "HFTransformerModel._build_dense_attention_mask"
        raise _missing(missing, AttributeError(missing))
    return SimpleNamespace(
        module=model,
        implementation_name=model._ATTN_IMPLEMENTATION,
        model_class=model.HFTransformerModel,
    )


def qwen3_parallelize_module() -> ModuleType:
    """torchtitan.models.qwen3.parallelize, whose ``apply_fsdp_to_decoder`` name we wrap."""
    try:
        from torchtitan.models.qwen3 import parallelize
    except ImportError as e:
        raise _missing("torchtitan.models.qwen3.parallelize", e) from e
    if not hasattr(parallelize, "apply_fsdp_to_decoder"):
        missing = "torchtitan.models.qwen3.parallelize.apply_fsdp_to_decoder"
        raise _missing(missing, AttributeError(missing))
    return parallelize


def find_checkpoint_step(folder: str | Path) -> int:
    """The newest complete ``step-N`` checkpoint in ``folder`` (-1: none), found exactly
    as torchtitan's loader finds it (``CheckpointManager._find_load_step``).

    That method reads only the folder it is given; it is called unbound, since a
    manager needs a built model to exist.
    """
    try:
        from torchtitan.components.checkpoint import CheckpointManager

        find = CheckpointManager._find_load_step
    except (ImportError, AttributeError) as e:
        raise _missing("CheckpointManager._find_load_step", e) from e
    return find(None, str(folder))  # type: ignore[arg-type]
