"""The architecture numbers of a Qwen3 model, and the named shapes this course trains.

A *shape* is what a Hugging Face ``config.json`` says about a Qwen3 model. It is read
and written through transformers' own config classes (``Qwen3Config`` /
``Qwen3MoeConfig``), so legacy and v5 spellings (``rope_theta`` vs ``rope_parameters``,
``num_experts`` vs ``num_local_experts``) are transformers' problem, not ours.

:func:`native_model_config` is torchtitan's own Qwen3 config for a shape; built on the
meta device it counts a shape's parameters and (through torchtitan's HF adapter) names
the tensors its checkpoint must hold. Importing this module is cheap (no torch, no
transformers): the command line needs the shape names before it imports anything heavy.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import ConfigError

#: Embedding rows of every Qwen3 checkpoint (151,643 BPE ranks + 26 added tokens,
#: padded to a multiple of 128). The one place this number is written.
VOCAB_SIZE = 151936


@dataclass(frozen=True)
class Qwen3Shape:
    """The architecture numbers of a Qwen3 model (HF config.json names in comments)."""

    dim: int  # hidden_size
    n_layers: int  # num_hidden_layers
    n_heads: int  # num_attention_heads
    n_kv_heads: int  # num_key_value_heads
    head_dim: int  # head_dim
    hidden_dim: int  # intermediate_size (dense MLP)
    vocab_size: int = VOCAB_SIZE  # vocab_size
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

    def same_architecture(self, other: Qwen3Shape) -> bool:
        """Equal in everything but the RoPE cache length (which only bounds seq_len)."""
        return not [d for d in self.differences(other) if not d.startswith("max_seq_len")]

    def parameter_count(self) -> int:
        """Parameters of the model, a tied embedding counted once: torchtitan's own Qwen3
        of this shape, built on the meta device (no memory; each variant agrees, tested)."""
        return _parameter_count(self)

    @classmethod
    def from_hf_config(cls, path: str | Path) -> Qwen3Shape:
        """Read a Hugging Face Qwen3 ``config.json`` (a file or the folder holding it)."""
        from huggingface_hub.errors import StrictDataclassError
        from transformers import AutoConfig

        from .config_check import read_config_json

        path = Path(path).expanduser()
        folder = path.parent if path.name == "config.json" else path
        if not os.path.lexists(folder / "config.json"):
            raise ConfigError(
                f"{folder / 'config.json'} not found; a checkpoint folder holds config.json "
                "and *.safetensors (a Hugging Face model folder)"
            )
        fix = "copy config.json again from the model's folder (a Hugging Face Qwen3 folder)"
        read_config_json(folder / "config.json", ("qwen3", "qwen3_moe"), training=True, fix=fix)
        try:  # (checked above, so what transformers refuses here is a field we never read)
            cfg = AutoConfig.from_pretrained(folder, local_files_only=True)
        except (ValueError, TypeError, OSError, StrictDataclassError) as e:
            said = " ".join(str(e).split())
            msg = f"{folder / 'config.json'} is not a readable model config ({said})"
            raise ConfigError(msg) from None
        moe = cfg.model_type == "qwen3_moe"
        return cls(
            dim=cfg.hidden_size,
            n_layers=cfg.num_hidden_layers,
            n_heads=cfg.num_attention_heads,
            n_kv_heads=cfg.num_key_value_heads,
            head_dim=cfg.head_dim,
            hidden_dim=cfg.intermediate_size,
            vocab_size=cfg.vocab_size,
            rope_theta=float(cfg.rope_parameters["rope_theta"]),
            # the RoPE cache is built for this many positions; 40960 is Qwen3's
            # published context, and nothing here trains longer
            max_seq_len=min(cfg.max_position_embeddings, 40960),
            tie_embeddings=bool(cfg.tie_word_embeddings),
            norm_eps=float(cfg.rms_norm_eps),
            n_experts=cfg.num_experts if moe else 0,
            top_k=cfg.num_experts_per_tok if moe else 0,
            moe_hidden_dim=cfg.moe_intermediate_size if moe else 0,
        )

    def hf_config(self):
        """A transformers ``Qwen3Config`` (or ``Qwen3MoeConfig``) with exactly these numbers."""
        from transformers import Qwen3Config, Qwen3MoeConfig

        moe = {}
        if self.is_moe:
            moe = dict(
                num_experts=self.n_experts,
                num_experts_per_tok=self.top_k,
                moe_intermediate_size=self.moe_hidden_dim,
                norm_topk_prob=True,
                decoder_sparse_step=1,
                mlp_only_layers=[],
            )
        cls = Qwen3MoeConfig if self.is_moe else Qwen3Config
        from ..assets import EOS_ID, PAD_ID

        return cls(
            **moe,
            vocab_size=self.vocab_size,
            hidden_size=self.dim,
            intermediate_size=self.hidden_dim,
            num_hidden_layers=self.n_layers,
            num_attention_heads=self.n_heads,
            num_key_value_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_seq_len,
            rms_norm_eps=self.norm_eps,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            tie_word_embeddings=self.tie_embeddings,
            attention_bias=False,
            bos_token_id=None,
            eos_token_id=EOS_ID if self.vocab_size > EOS_ID else None,
            pad_token_id=PAD_ID if self.vocab_size > PAD_ID else None,
            architectures=["Qwen3MoeForCausalLM" if self.is_moe else "Qwen3ForCausalLM"],
        )


#: dense, 4 layers, dim 128, the real vocabulary: what a CPU trains in seconds
TINY = Qwen3Shape(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, hidden_dim=384)
#: the same with 8 experts (top-2) in place of the dense MLP
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
#: Qwen/Qwen3-0.6B (config.json on the hub; torchtitan's "0.6B" flavor has the same
#: numbers): the smallest published Qwen3, real weights a laptop can train
QWEN3_0_6B = Qwen3Shape(
    dim=1024,
    n_layers=28,
    n_heads=16,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=3072,
    rope_theta=1_000_000.0,
    max_seq_len=40960,
)
#: Qwen/Qwen3-4B-Instruct-2507 (config.json on the hub)
QWEN3_4B_2507 = Qwen3Shape(
    dim=2560,
    n_layers=36,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=9728,
    max_seq_len=40960,
)
#: Qwen/Qwen3-30B-A3B (config.json on the hub)
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


#: The rest of the published Qwen3 family (the planner's models). Each is the model
#: card's config.json on the hub (Qwen/Qwen3-1.7B, -8B, -14B, -32B, -235B-A22B), and
#: torchtitan 0.3.0's own flavors of the same names (torchtitan/models/qwen3/__init__.py:
#: "1.7B", "8B", "14B", "32B", "235B-A22B") hold the same numbers; a test builds each on
#: the meta device and checks its parameter count against the model card's figure.
QWEN3_1_7B = Qwen3Shape(
    dim=2048,
    n_layers=28,
    n_heads=16,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=6144,
    rope_theta=1_000_000.0,
    max_seq_len=40960,
)
QWEN3_8B = Qwen3Shape(
    dim=4096,
    n_layers=36,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=12288,
    rope_theta=1_000_000.0,
    max_seq_len=40960,
    tie_embeddings=False,
)
QWEN3_14B = Qwen3Shape(
    dim=5120,
    n_layers=40,
    n_heads=40,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=17408,
    rope_theta=1_000_000.0,
    max_seq_len=40960,
    tie_embeddings=False,
)
QWEN3_32B = Qwen3Shape(
    dim=5120,
    n_layers=64,
    n_heads=64,
    n_kv_heads=8,
    head_dim=128,
    hidden_dim=25600,
    rope_theta=1_000_000.0,
    max_seq_len=40960,
    tie_embeddings=False,
)
QWEN3_235B_A22B = Qwen3Shape(
    dim=4096,
    n_layers=94,
    n_heads=64,
    n_kv_heads=4,
    head_dim=128,
    hidden_dim=12288,  # intermediate_size: unused, every layer is MoE
    rope_theta=1_000_000.0,
    max_seq_len=40960,
    tie_embeddings=False,
    n_experts=128,
    top_k=8,
    moe_hidden_dim=1536,
)


def active_parameter_count(shape: Qwen3Shape) -> int:
    """Parameters one token passes through: all of a dense model; for an MoE, every
    expert's share but ``top_k`` of ``n_experts`` (what a model card calls "activated")."""
    n = shape.parameter_count()
    if not shape.is_moe:
        return n
    per_expert = 3 * shape.dim * shape.moe_hidden_dim
    return n - shape.n_layers * (shape.n_experts - shape.top_k) * per_expert


def embedding_parameter_count(shape: Qwen3Shape) -> int:
    """The vocabulary table(s): one when tied, the embedding and the output layer if not."""
    return shape.vocab_size * shape.dim * (1 if shape.tie_embeddings else 2)


def native_model_config(shape: Qwen3Shape):
    """torchtitan's own Qwen3 model config for ``shape`` (dense or MoE).

    Built with the helpers torchtitan.models.qwen3 uses for its flavors (FlexAttention,
    grouped-matmul experts); the trainer config swaps attention and experts through
    torchtitan's override mechanism, so this stays torchtitan's model.
    """
    from ..stack import collector_paused
    from ..torchtitan_internals import qwen3_builders

    with collector_paused():  # planning's first torchtitan import: most of the stack
        from torchtitan.models.common import CosSinRoPE, Embedding, Linear
        from torchtitan.models.common.nn_modules import RMSNorm
        from torchtitan.models.qwen3.model import Qwen3Model

    b = qwen3_builders()
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
        layers = b.moe_layers(
            **common,
            moe_hidden_dim=s.moe_hidden_dim,
            num_experts=s.n_experts,
            top_k=s.top_k,
            moe_comm_backend="standard",
        )
    else:
        layers = b.dense_layers(**common, hidden_dim=s.hidden_dim)
    config = Qwen3Model.Config(
        vocab_size=s.vocab_size,
        dim=s.dim,
        norm=b.norm(s.dim),
        enable_weight_tying=s.tie_embeddings,
        tok_embeddings=Embedding.Config(
            num_embeddings=s.vocab_size,
            embedding_dim=s.dim,
            # torchtitan initialises a tied pair through lm_head only
            param_init=b.embedding_skip_init if s.tie_embeddings else b.embedding_init,
        ),
        lm_head=Linear.Config(
            in_features=s.dim, out_features=s.vocab_size, param_init=b.linear_init
        ),
        layers=layers,
    )
    for _, norm, _, _ in config.traverse(RMSNorm.Config):
        norm.eps = s.norm_eps
    return config


@functools.cache
def _parameter_count(shape: Qwen3Shape) -> int:
    import torch

    with torch.device("meta"):
        model = native_model_config(shape).build()
    return sum(p.numel() for p in model.parameters())  # a tied pair counts once
