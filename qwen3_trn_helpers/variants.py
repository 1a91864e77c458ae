"""Model variants and presets, as small functions returning torchtitan configs.

A *shape* is what a Hugging Face ``config.json`` says about a Qwen3 model; a *preset*
names a shape plus where its weights live and how it is laid out on trn2; a *variant* is
the code that runs it (torchtitan's native Qwen3 here). Following torchtitan's own
registry style, each is plain Python a reader can follow top to bottom.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError

VARIANTS = ("native",)


@dataclass(frozen=True)
class Qwen3Shape:
    """The architecture numbers of a dense Qwen3 model (HF config.json names in comments)."""

    dim: int  # hidden_size
    n_layers: int  # num_hidden_layers
    n_heads: int  # num_attention_heads
    n_kv_heads: int  # num_key_value_heads
    head_dim: int  # head_dim
    hidden_dim: int  # intermediate_size
    vocab_size: int = 151936  # vocab_size
    rope_theta: float = 5_000_000.0  # rope_theta (2507 checkpoints: 5e6; torchtitan: 1e6)
    max_seq_len: int = 4096  # max_position_embeddings (capped for the RoPE cache)
    tie_embeddings: bool = True  # tie_word_embeddings
    norm_eps: float = 1e-6  # rms_norm_eps

    @classmethod
    def from_hf_config(cls, path: str | Path) -> Qwen3Shape:
        """Read a Hugging Face Qwen3 ``config.json`` (a file or the folder holding it)."""
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        try:
            cfg = json.loads(file.read_text())
        except FileNotFoundError:
            raise ConfigError(
                f"{file} not found; --init needs a Hugging Face model folder "
                "with config.json and *.safetensors"
            ) from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{file} is not valid JSON ({e})") from None
        try:
            rope_theta = cfg.get("rope_theta")
            if rope_theta is None:  # transformers v5 writes rope_parameters instead
                rope_theta = (cfg.get("rope_parameters") or {}).get("rope_theta", 1e6)
            return cls(
                dim=cfg["hidden_size"],
                n_layers=cfg["num_hidden_layers"],
                n_heads=cfg["num_attention_heads"],
                n_kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
                head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
                hidden_dim=cfg["intermediate_size"],
                vocab_size=cfg["vocab_size"],
                rope_theta=float(rope_theta),
                max_seq_len=min(int(cfg.get("max_position_embeddings", 4096)), 40960),
                tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            )
        except KeyError as e:
            raise ConfigError(f"{file} lacks {e.args[0]!r}; is it a Qwen3 config?") from None


@dataclass(frozen=True)
class Layout:
    """How one run is spread over devices (torchtitan's parallelism degrees)."""

    tp: int = 1
    fsdp: int = -1  # -1: whatever is left of the world size
    ep: int = 1

    def describe(self, world: int) -> str:
        fsdp = world // self.tp if self.fsdp == -1 else self.fsdp
        return f"TP {self.tp} x FSDP {fsdp}" + (f" (EP {self.ep})" if self.ep > 1 else "")


@dataclass(frozen=True)
class Preset:
    name: str
    shape: Qwen3Shape
    description: str
    hub_id: str | None = None  # published weights for --init pretrained
    seq_len: int = 256
    layout: Layout = field(default_factory=Layout)
    world_size: int = 1


TINY = Qwen3Shape(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, hidden_dim=384)

QWEN3_4B_2507 = Qwen3Shape(
    dim=2560,
    n_layers=36,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=9728,
    max_seq_len=40960,
)

PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        shape=TINY,
        description="4 layers, dim 128, real Qwen3 vocab (151936): CPU, CI and laptops",
    ),
    "4b": Preset(
        name="4b",
        shape=QWEN3_4B_2507,
        description="Qwen/Qwen3-4B-Instruct-2507 on trn2.48xlarge, 64 logical NeuronCores",
        hub_id="Qwen/Qwen3-4B-Instruct-2507",
        seq_len=4096,
        layout=Layout(tp=4, fsdp=16),
        world_size=64,
    ),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def check_variant(name: str) -> str:
    if name not in VARIANTS:
        raise ConfigError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}")
    return name


def native_model_config(shape: Qwen3Shape, attention: str = "sdpa"):
    """torchtitan's own Qwen3 model config for ``shape``.

    ``attention="sdpa"`` swaps torchtitan's FlexAttention (no CPU backward) for
    :class:`~qwen3_trn_helpers.attention.DocumentMaskedSDPA`; ``"flex"`` keeps it.
    """
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.qwen3 import (
        _EMBEDDING_INIT,
        _EMBEDDING_SKIP_INIT,
        _LINEAR_INIT,
        _build_qwen3_layers,
        _qwen3_norm,
    )
    from torchtitan.models.qwen3.model import Qwen3Model

    from .attention import DocumentMaskedSDPA

    s = shape
    config = Qwen3Model.Config(
        vocab_size=s.vocab_size,
        dim=s.dim,
        norm=_qwen3_norm(s.dim),
        enable_weight_tying=s.tie_embeddings,
        tok_embeddings=Embedding.Config(
            num_embeddings=s.vocab_size,
            embedding_dim=s.dim,
            # torchtitan initialises a tied pair through lm_head only
            param_init=_EMBEDDING_SKIP_INIT if s.tie_embeddings else _EMBEDDING_INIT,
        ),
        lm_head=Linear.Config(
            in_features=s.dim, out_features=s.vocab_size, param_init=_LINEAR_INIT
        ),
        layers=_build_qwen3_layers(
            n_layers=s.n_layers,
            dim=s.dim,
            n_heads=s.n_heads,
            n_kv_heads=s.n_kv_heads,
            head_dim=s.head_dim,
            hidden_dim=s.hidden_dim,
            attn_backend="flex",
            rope=CosSinRoPE.Config(dim=s.head_dim, max_seq_len=s.max_seq_len, theta=s.rope_theta),
        ),
    )
    for _, norm, _, _ in config.traverse(RMSNorm.Config):
        norm.eps = s.norm_eps
    if attention == "sdpa":
        for layer in config.layers:
            layer.attention.inner_attention = DocumentMaskedSDPA.Config()
    elif attention != "flex":
        raise ConfigError(f"unknown attention backend {attention!r}; use sdpa or flex")
    return config


def model_spec(variant: str, shape: Qwen3Shape, flavor: str, attention: str = "sdpa"):
    """A torchtitan ``ModelSpec``, assembled like ``torchtitan.models.qwen3.model_registry``."""
    from torchtitan.components.optimizer import register_moe_load_balancing_hook
    from torchtitan.distributed.pipeline_parallel import pipeline_llm
    from torchtitan.models.qwen3 import Qwen3StateDictAdapter, parallelize_qwen3
    from torchtitan.protocols.model_spec import ModelSpec

    check_variant(variant)
    return ModelSpec(
        name="qwen3",
        flavor=flavor,
        model=native_model_config(shape, attention),
        parallelize_fn=parallelize_qwen3,
        pipelining_fn=pipeline_llm,
        post_optimizer_build_fn=register_moe_load_balancing_hook,
        state_dict_adapter=Qwen3StateDictAdapter,
    )
