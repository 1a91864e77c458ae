"""A Hugging Face ``config.json`` checked before any library sees it.

transformers, torchtitan and the planner each take a config.json's numbers on trust: a
hostile probe (issue 50) had ``num_hidden_layers: 1000000`` build a model for minutes
without a word, ``-3`` end in transformers' two-line "must be equal to the number of
``layer_types``", ``vocab_size: "abc"`` in its strict-dataclass error, 5 heads over 2
key/value heads in torchtitan's "for fused QKV", and ``head_dim: 0`` in
``ZeroDivisionError``. Here every number the package uses is checked for its type, its
range and its relations to the others, and a bad one is one line naming the file, the
field and the limit.

The upper bounds are several times the largest published model's (named beside each),
so a real model always passes and a typo or a hostile file never takes minutes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..files import MiB, read_json

#: a config.json's size at most (Qwen3's are about 1 KiB; a classifier's label names
#: make some a few MiB)
CONFIG_LIMIT = 16 * MiB

#: field -> (smallest, largest, the published model the largest leaves room for)
SIZES: dict[str, tuple[int, int, str]] = {
    "hidden_size": (1, 65_536, "Llama 3.1 405B: 16,384"),
    "intermediate_size": (1, 262_144, "Llama 3.1 405B: 53,248"),
    "num_hidden_layers": (1, 512, "Llama 3.1 405B: 126"),
    "num_attention_heads": (1, 1_024, "Llama 3.1 405B: 128"),
    "num_key_value_heads": (1, 1_024, "Qwen3: at most 8"),
    "head_dim": (2, 1_024, "Gemma 3: 256"),
    "vocab_size": (1, 4_194_304, "Gemma 3: 262,144"),
    "max_position_embeddings": (1, 16_777_216, "Llama 4 Scout: 10,485,760"),
    "num_experts": (1, 4_096, "DeepSeek V3: 256"),
    "num_local_experts": (1, 4_096, "DeepSeek V3: 256"),
    "num_experts_per_tok": (1, 64, "DeepSeek V3: 8"),
    "moe_intermediate_size": (1, 262_144, "Qwen3-235B-A22B: 1,536"),
    "decoder_sparse_step": (1, 512, "Qwen3 MoE: 1"),
}
#: rope_theta's range: above 1 (the frequencies fall along the head), finite
ROPE_THETA = (1.0, 1e12)
#: rms_norm_eps's range (Qwen3: 1e-6)
NORM_EPS = (0.0, 0.1)


def read_config_json(
    file: Path, architectures: tuple[str, ...], *, training: bool, fix: str
) -> dict[str, Any]:
    """The object in the config.json ``file``, read as every file here is (files.py)
    and checked (:func:`check_model_config`) before any library reads it."""
    cfg = read_json(file, limit=CONFIG_LIMIT, fix=fix)
    check_model_config(cfg, file, architectures=architectures, training=training)
    return cfg


def _where(file: Path | str) -> str:
    return f"{file}:"


def _integer(cfg: dict, key: str, file: Path | str, default: Any = None) -> int:
    """``cfg[key]`` (or ``default``), an integer within :data:`SIZES`' range."""
    value = cfg.get(key, default)
    got = "missing" if value is None and key not in cfg else f"got {value!r}"
    within(key, value, f"{_where(file)} {key}", got)
    return value


def within(key: str, value: Any, what: str, got: str | None = None) -> None:
    """Refuse ``value`` unless it is an integer in :data:`SIZES`' range for ``key``;
    ``what`` names it in the line (a config's field, a flag such as --layers)."""
    low, high, example = SIZES[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        got = got or f"got {value!r}"
        raise ConfigError(f"{what} must be an integer from {low} to {high:,} ({example}), {got}")


def _number(value: Any, key: str, file: Path | str, low: float, high: float) -> float:
    """A finite number strictly above ``low`` and at most ``high``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not low < value <= high:
        raise ConfigError(
            f"{_where(file)} {key} must be a number above {low:g} and at most {high:g}, "
            f"got {value!r}"
        )
    return float(value)


def rope(cfg: dict, file: Path | str) -> tuple[float | None, str]:
    """(rope_theta, rope type) from ``rope_parameters`` (transformers 5) or the legacy
    ``rope_theta`` / ``rope_scaling``; the theta None where the config gives none."""
    params = cfg.get("rope_parameters")
    scaling = cfg.get("rope_scaling")
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{_where(file)} {key} must be an object, got {value!r}")
    params, scaling = params or {}, scaling or {}
    theta = params.get("rope_theta", cfg.get("rope_theta"))
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if not isinstance(kind, str):
        raise ConfigError(f"{_where(file)} rope_type must be a name, got {kind!r}")
    if theta is not None:
        theta = _number(theta, "rope_theta", file, *ROPE_THETA)
    return theta, kind


def experts_field(cfg: dict) -> str | None:
    """Where an MoE config counts its experts: ``num_experts`` (Qwen3-MoE as published),
    ``num_local_experts`` (Mixtral, and Qwen3-MoE as transformers 5 writes it); None for
    a dense model."""
    if cfg.get("model_type") == "qwen3_moe" and "num_experts" in cfg:
        return "num_experts"
    return "num_local_experts" if cfg.get("model_type") in ("qwen3_moe", "mixtral") else None


def check_model_config(
    cfg: dict, file: Path | str, *, architectures: tuple[str, ...], training: bool
) -> None:
    """Refuse ``cfg`` (the object in ``file``) unless its numbers make a model: each
    size an integer in :data:`SIZES`' range, the heads a whole number of groups per
    key/value head, an even head_dim (RoPE turns pairs), top-k within the experts,
    layer_types one per layer, a finite rope_theta above 1.

    ``training``: the config is trained here (Qwen3 through torchtitan's own model), so
    what that model does not compute is refused rather than trained silently as
    something else: another activation, attention biases, sliding-window layers,
    scaled RoPE, dense layers between MoE ones."""
    arch = cfg.get("model_type")
    if arch not in architectures:
        raise ConfigError(
            f"{_where(file)} model_type {arch!r} is not one read here ({', '.join(architectures)})"
        )
    dim = _integer(cfg, "hidden_size", file)
    layers = _integer(cfg, "num_hidden_layers", file)
    heads = _integer(cfg, "num_attention_heads", file)
    kv_heads = _integer({"num_key_value_heads": cfg.get("num_key_value_heads") or heads},
                        "num_key_value_heads", file)  # fmt: skip
    if heads % kv_heads:
        raise ConfigError(
            f"{_where(file)} num_attention_heads {heads} must be a multiple of "
            f"num_key_value_heads {kv_heads} (each key/value head serves a whole group)"
        )
    if cfg.get("head_dim") is None:
        if dim % heads:
            raise ConfigError(
                f"{_where(file)} hidden_size {dim} must be a multiple of num_attention_heads "
                f"{heads} when the config gives no head_dim"
            )
        head_dim = dim // heads
    else:
        head_dim = _integer(cfg, "head_dim", file)
    if head_dim % 2:
        raise ConfigError(
            f"{_where(file)} head_dim {head_dim} must be even (RoPE turns pairs of numbers)"
        )
    _integer(cfg, "intermediate_size", file)
    vocab = _integer(cfg, "vocab_size", file)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        ids = cfg.get(key)
        ids = ids if isinstance(ids, list) else [ids]
        if any(i is not None and (type(i) is not int or not 0 <= i < vocab) for i in ids):
            raise ConfigError(
                f"{_where(file)} {key} must be a token id below vocab_size {vocab} (or "
                f"null), got {cfg.get(key)!r}"
            )
    _integer(cfg, "max_position_embeddings", file, 4096)
    experts_key = experts_field(cfg)
    if experts_key:
        experts = _integer(cfg, experts_key, file)
        top_k = _integer(cfg, "num_experts_per_tok", file)
        if top_k > experts:
            raise ConfigError(
                f"{_where(file)} num_experts_per_tok {top_k} must be at most {experts_key} "
                f"{experts}"
            )
        if arch == "qwen3_moe":
            _integer(cfg, "moe_intermediate_size", file)
    theta, rope_type = rope(cfg, file)
    if "rms_norm_eps" in cfg:
        _number(cfg["rms_norm_eps"], "rms_norm_eps", file, *NORM_EPS)
    if "tie_word_embeddings" in cfg and not isinstance(cfg["tie_word_embeddings"], bool):
        raise ConfigError(
            f"{_where(file)} tie_word_embeddings must be true or false, "
            f"got {cfg['tie_word_embeddings']!r}"
        )
    types = cfg.get("layer_types")
    if types is not None and (
        not isinstance(types, list)
        or len(types) != layers
        or any(t not in ("full_attention", "sliding_attention") for t in types)
    ):
        raise ConfigError(
            f"{_where(file)} layer_types must list one of full_attention or "
            f"sliding_attention for each of the {layers} layers (num_hidden_layers)"
        )
    if training:
        _trainable(cfg, file, arch, layers, theta, rope_type, types or [])


def _trainable(
    cfg: dict, file: Path | str, arch: str, layers: int, theta: float | None, rope_type: str,
    types: list[str],
) -> None:  # fmt: skip
    """What torchtitan's Qwen3 computes, which a trained config must ask for."""
    differs = []
    if cfg.get("hidden_act", "silu") != "silu":
        differs.append(f"hidden_act {cfg['hidden_act']!r} (it computes silu)")
    if cfg.get("attention_bias", False) is not False:
        differs.append(f"attention_bias {cfg['attention_bias']!r} (it has no biases)")
    if cfg.get("use_sliding_window", False) is not False or "sliding_attention" in types:
        differs.append("sliding-window attention (it attends to every earlier token)")
    if rope_type != "default":
        differs.append(f"rope_type {rope_type!r} (it computes plain RoPE)")
    if theta is None:
        differs.append("no rope_theta (rope_parameters.rope_theta)")
    if arch == "qwen3_moe":
        sparse = _integer(cfg, "decoder_sparse_step", file, 1)
        if sparse != 1 or cfg.get("mlp_only_layers") not in (None, []):
            differs.append(
                "dense layers between the MoE ones (decoder_sparse_step, mlp_only_layers; "
                "it puts experts in every layer)"
            )
    if differs:
        raise ConfigError(
            f"{_where(file)} asks for {'; '.join(differs)}: torchtitan's Qwen3, which "
            "trains it here, would train another model; use a Qwen3 checkpoint's own config"
        )
