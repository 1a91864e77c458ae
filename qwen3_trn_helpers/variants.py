"""Model variants and presets, as small functions returning torchtitan configs.

A *shape* is what a Hugging Face ``config.json`` says about a Qwen3 model; a *preset*
names a shape plus where its weights live and how it is laid out on trn2; a *variant* is
the code that runs it (torchtitan's native Qwen3 here). Following torchtitan's own
registry style, each is plain Python a reader can follow top to bottom.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from .errors import ConfigError

VARIANTS = ("native", "transformers_v5", "nki_moe")

#: What each variant is, for tables and help text.
VARIANT_INFO = {
    "native": "torchtitan's own Qwen3 (torchtitan.models.qwen3)",
    "transformers_v5": "Hugging Face Transformers v5 Qwen3 inside torchtitan "
    "(experiments.transformers_modeling_backend)",
    "nki_moe": "Qwen3 MoE with blockwise expert matmuls (NKI kernels on Trainium, "
    "their PyTorch reference elsewhere)",
}


@dataclass(frozen=True)
class Qwen3Shape:
    """The architecture numbers of a Qwen3 model (HF config.json names in comments)."""

    dim: int  # hidden_size
    n_layers: int  # num_hidden_layers
    n_heads: int  # num_attention_heads
    n_kv_heads: int  # num_key_value_heads
    head_dim: int  # head_dim
    hidden_dim: int  # intermediate_size (dense MLP)
    vocab_size: int = 151936  # vocab_size
    rope_theta: float = 5_000_000.0  # rope_theta (2507 checkpoints: 5e6; torchtitan: 1e6)
    max_seq_len: int = 4096  # max_position_embeddings (capped for the RoPE cache)
    tie_embeddings: bool = True  # tie_word_embeddings
    norm_eps: float = 1e-6  # rms_norm_eps
    n_experts: int = 0  # num_experts (0: dense model)
    top_k: int = 0  # num_experts_per_tok
    moe_hidden_dim: int = 0  # moe_intermediate_size

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    def differences(self, other: Qwen3Shape) -> list[str]:
        """Human-readable field differences, e.g. ['rope_theta 1000000.0 != 5000000.0']."""
        return [
            f"{f.name} {getattr(self, f.name)!r} != {getattr(other, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]

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
        if cfg.get("model_type") not in (None, "qwen3", "qwen3_moe"):
            raise ConfigError(
                f"{file} describes a {cfg.get('model_type')!r} model, not Qwen3 (qwen3 or "
                "qwen3_moe)"
            )
        try:
            rope_theta = cfg.get("rope_theta")
            if rope_theta is None:  # transformers v5 writes rope_parameters instead
                rope_theta = (cfg.get("rope_parameters") or {}).get("rope_theta", 1e6)
            # the hub's Qwen3 MoE configs say num_experts; transformers v5 writes
            # num_local_experts
            n_experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
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
                n_experts=n_experts,
                top_k=int(cfg.get("num_experts_per_tok") or 0) if n_experts else 0,
                moe_hidden_dim=int(cfg.get("moe_intermediate_size") or 0) if n_experts else 0,
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
        return f"TP {self.tp} x FSDP {fsdp}" + (f" x EP {self.ep}" if self.ep > 1 else "")


@dataclass(frozen=True)
class Preset:
    name: str
    shape: Qwen3Shape
    description: str
    hub_id: str | None = None  # published weights for --init pretrained
    seq_len: int = 256
    layout: Layout = field(default_factory=Layout)
    world_size: int = 1
    moe_block_size: int = 0  # nki_moe: tokens per block
    # torchtitan activation checkpointing: "none", "selective" or "full"; the trn2 presets
    # need it to fit 24 GiB per logical core at seq 4096 (see scaling.memory_per_core)
    activation_checkpoint: str = "none"


TINY = Qwen3Shape(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, hidden_dim=384)
TINY_MOE = Qwen3Shape(
    dim=128,
    n_layers=4,
    n_heads=4,
    n_kv_heads=2,
    head_dim=32,
    hidden_dim=384,
    n_experts=8,
    top_k=2,
    moe_hidden_dim=64,
)
QWEN3_4B_2507 = Qwen3Shape(
    dim=2560,
    n_layers=36,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=9728,
    max_seq_len=40960,
)
QWEN3_30B_A3B = Qwen3Shape(
    dim=2048,
    n_layers=48,
    n_heads=32,
    n_kv_heads=4,
    head_dim=128,
    hidden_dim=6144,
    rope_theta=1_000_000.0,
    max_seq_len=40960,
    tie_embeddings=False,
    n_experts=128,
    top_k=8,
    moe_hidden_dim=768,
)

PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        shape=TINY,
        description="dense, 4 layers, dim 128, real Qwen3 vocab (151936): CPU, CI, laptops",
    ),
    "tiny_moe": Preset(
        name="tiny_moe",
        shape=TINY_MOE,
        description="MoE, 4 layers, 8 experts (top-2), dim 128, real vocab: CPU, CI",
        moe_block_size=64,
    ),
    "4b": Preset(
        name="4b",
        shape=QWEN3_4B_2507,
        description="Qwen/Qwen3-4B-Instruct-2507 on trn2.48xlarge, 64 logical NeuronCores",
        hub_id="Qwen/Qwen3-4B-Instruct-2507",
        seq_len=4096,
        layout=Layout(tp=4, fsdp=16),
        world_size=64,
        activation_checkpoint="selective",
    ),
    "30b-a3b": Preset(
        name="30b-a3b",
        shape=QWEN3_30B_A3B,
        description="Qwen/Qwen3-30B-A3B (128 experts, top-8) on trn2.48xlarge, 64 cores",
        hub_id="Qwen/Qwen3-30B-A3B",
        seq_len=4096,
        layout=Layout(tp=1, fsdp=64),
        world_size=64,
        moe_block_size=256,
        activation_checkpoint="full",
    ),
}

#: variant -> (preset off Trainium, preset on Trainium)
DEFAULT_PRESETS = {
    "native": ("tiny", "4b"),
    "transformers_v5": ("tiny", "4b"),
    "nki_moe": ("tiny_moe", "30b-a3b"),
}


def default_preset(variant: str, device_type: str) -> str:
    off, on = DEFAULT_PRESETS[check_variant(variant)]
    return on if device_type == "neuron" else off


def check_shape_for_variant(variant: str, shape: Qwen3Shape, source: str) -> None:
    """A dense checkpoint cannot run as nki_moe, nor an MoE one as a dense variant."""
    if variant == "nki_moe" and not shape.is_moe:
        raise ConfigError(
            f"variant 'nki_moe' needs a Qwen3 MoE model, but {source} is dense; use "
            "--variant native or transformers_v5, or an MoE checkpoint (Qwen3-30B-A3B)"
        )
    if variant != "nki_moe" and shape.is_moe:
        raise ConfigError(
            f"variant {variant!r} is for dense Qwen3, but {source} is an MoE model "
            f"({shape.n_experts} experts); use --variant nki_moe"
        )


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def check_variant(name: str) -> str:
    if name not in VARIANTS:
        raise ConfigError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}")
    return name


def native_model_config(
    shape: Qwen3Shape,
    attention: str = "sdpa",
    moe_block_size: int = 0,
    moe_backend: str = "auto",
):
    """torchtitan's own Qwen3 model config for ``shape`` (dense or MoE).

    ``attention="sdpa"`` swaps torchtitan's FlexAttention (no CPU backward) for
    :class:`~qwen3_trn_helpers.attention.DocumentMaskedSDPA`; ``"flex"`` keeps it.
    For an MoE shape, ``moe_block_size > 0`` replaces torchtitan's routed experts with
    :class:`~qwen3_trn_helpers.moe_blockwise.BlockwiseRoutedExperts` (the nki_moe
    variant); ``0`` keeps torchtitan's own grouped-matmul MoE.
    """
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.qwen3 import (
        _EMBEDDING_INIT,
        _EMBEDDING_SKIP_INIT,
        _LINEAR_INIT,
        _build_qwen3_layers,
        _build_qwen3_moe_layers,
        _qwen3_norm,
    )
    from torchtitan.models.qwen3.model import Qwen3Model

    from .attention import DocumentMaskedSDPA

    s = shape
    rope = CosSinRoPE.Config(dim=s.head_dim, max_seq_len=s.max_seq_len, theta=s.rope_theta)
    common = dict(
        n_layers=s.n_layers,
        dim=s.dim,
        n_heads=s.n_heads,
        n_kv_heads=s.n_kv_heads,
        head_dim=s.head_dim,
        attn_backend="flex",
        rope=rope,
    )
    if s.is_moe:
        layers = _build_qwen3_moe_layers(
            **common,
            moe_hidden_dim=s.moe_hidden_dim,
            num_experts=s.n_experts,
            top_k=s.top_k,
            moe_comm_backend="standard",
        )
    else:
        layers = _build_qwen3_layers(**common, hidden_dim=s.hidden_dim)
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
        layers=layers,
    )
    for _, norm, _, _ in config.traverse(RMSNorm.Config):
        norm.eps = s.norm_eps
    if attention == "sdpa":
        for layer in config.layers:
            layer.attention.inner_attention = DocumentMaskedSDPA.Config()
    elif attention != "flex":
        raise ConfigError(f"unknown attention backend {attention!r}; use sdpa or flex")
    if s.is_moe and moe_block_size > 0:
        from .moe_blockwise import BlockwiseRoutedExperts

        for layer in config.layers:
            experts = layer.moe.routed_experts
            layer.moe.routed_experts = BlockwiseRoutedExperts.Config(
                inner_experts=experts.inner_experts,
                token_dispatcher=experts.token_dispatcher,
                block_size=moe_block_size,
                backend=moe_backend,
            )
    return config


def hf_backend_model_config():
    """torchtitan's transformers-backend model config for a Qwen3 ``config.json``.

    The "full" flavor takes every number from the HF config; ``block_causal`` masks
    attention per packed document, as the native model does.
    """
    from torchtitan.experiments.transformers_modeling_backend import (
        HFTransformerModel,
        TitanModelConfig,
    )

    return HFTransformerModel.Config(model_config=TitanModelConfig(attn_mask_type="block_causal"))


def model_spec(
    variant: str,
    shape: Qwen3Shape,
    flavor: str,
    attention: str = "sdpa",
    moe_block_size: int = 0,
):
    """A torchtitan ``ModelSpec``, assembled like the variant's own ``model_registry``."""
    from torchtitan.components.optimizer import register_moe_load_balancing_hook
    from torchtitan.protocols.model_spec import ModelSpec

    check_variant(variant)
    if variant == "transformers_v5":
        from torchtitan.experiments.transformers_modeling_backend import (
            HFTransformerStateDictAdapter,
            parallelize_hf_transformers,
            pipeline_hf_transformers,
        )

        return ModelSpec(
            name="transformers_modeling_backend",
            flavor=flavor,
            model=hf_backend_model_config(),
            parallelize_fn=parallelize_hf_transformers,
            pipelining_fn=pipeline_hf_transformers,
            post_optimizer_build_fn=register_moe_load_balancing_hook,
            state_dict_adapter=HFTransformerStateDictAdapter,
        )
    from torchtitan.distributed.pipeline_parallel import pipeline_llm
    from torchtitan.models.qwen3 import Qwen3StateDictAdapter, parallelize_qwen3

    return ModelSpec(
        name="qwen3",
        flavor=flavor,
        model=native_model_config(shape, attention, moe_block_size if variant == "nki_moe" else 0),
        parallelize_fn=parallelize_qwen3,
        pipelining_fn=pipeline_llm,
        post_optimizer_build_fn=register_moe_load_balancing_hook,
        state_dict_adapter=Qwen3StateDictAdapter,
    )


def count_parameters(variant: str, shape: Qwen3Shape) -> int:
    """Parameters of the model a variant builds (on the meta device: no memory used)."""
    import torch

    with torch.device("meta"):
        if variant == "transformers_v5":
            from transformers import Qwen3ForCausalLM

            from .hf_checkpoint import hf_config

            model = Qwen3ForCausalLM(hf_config(shape))
        else:
            model = native_model_config(shape, moe_block_size=64 if shape.is_moe else 0).build()
    return sum(p.numel() for p in model.parameters())  # a tied pair counts once


#: How each variant runs attention and experts on each kind of machine.
RUNS_ON = {
    "native": (
        "torchtitan Qwen3; attention: SDPA with a packed-document mask (our backend)",
        "same model on `neuron`; FSDP/TP through torchtitan",
    ),
    "transformers_v5": (
        "HF Qwen3 module in torchtitan; HF SDPA attention with the backend's dense mask",
        "same HF module on `neuron`; torchtitan applies FSDP/TP to it",
    ),
    "nki_moe": (
        "torchtitan Qwen3 MoE; experts: blockwise PyTorch reference (autograd)",
        "experts on nki-library kernels (moe_cte forward, blockwise_mm_bwd backward)",
    ),
}


def variant_table(device_type: str = "cpu") -> list[dict[str, object]]:
    """One row per variant: its presets here and on trn2, sizes, and where things run."""
    rows = []
    for variant in VARIANTS:
        here, trn2 = (PRESETS[p] for p in DEFAULT_PRESETS[variant])
        rows.append(
            {
                "variant": variant,
                "what": VARIANT_INFO[variant],
                "preset here": here.name,
                "params here": count_parameters(variant, here.shape),
                "trn2 preset": trn2.name,
                "trn2 params": count_parameters(variant, trn2.shape),
                "layers": trn2.shape.n_layers,
                "experts (top-k)": (
                    f"{trn2.shape.n_experts} ({trn2.shape.top_k})" if trn2.shape.is_moe else "-"
                ),
                "trn2 layout": trn2.layout.describe(trn2.world_size),
                "off Trainium": RUNS_ON[variant][0],
                "on Trainium": RUNS_ON[variant][1],
            }
        )
    return rows
