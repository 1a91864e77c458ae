"""Hugging Face Qwen3 folders (config.json + safetensors): make, read and check them.

The same folder format serves three purposes: the published Qwen3 checkpoints on trn2,
the tiny checkpoints tests and CPU notebooks make with transformers, and the config
torchtitan's transformers backend reads (it builds its model from ``config.json``). A
folder is checked before training starts, so a truncated download or a checkpoint of the
wrong shape is a one-line error, not a failure deep inside torchtitan's loader.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from .errors import AssetError
from .variants import Qwen3Shape


def hf_config(shape: Qwen3Shape):
    """A transformers ``Qwen3Config`` (or ``Qwen3MoeConfig``) with exactly ``shape``'s numbers."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    moe = {}
    if shape.is_moe:
        moe = dict(
            num_experts=shape.n_experts,
            num_experts_per_tok=shape.top_k,
            moe_intermediate_size=shape.moe_hidden_dim,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    cls = Qwen3MoeConfig if shape.is_moe else Qwen3Config
    return cls(
        **moe,
        vocab_size=shape.vocab_size,
        hidden_size=shape.dim,
        intermediate_size=shape.hidden_dim,
        num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=shape.max_seq_len,
        rms_norm_eps=shape.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
        tie_word_embeddings=shape.tie_embeddings,
        attention_bias=False,
        bos_token_id=None,
        eos_token_id=151645 if shape.vocab_size > 151645 else None,
        pad_token_id=151643 if shape.vocab_size > 151643 else None,
        architectures=["Qwen3MoeForCausalLM" if shape.is_moe else "Qwen3ForCausalLM"],
    )


def write_hf_config(shape: Qwen3Shape, folder: str | Path) -> Path:
    """Just config.json: enough for torchtitan's transformers backend to build a model."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hf_config(shape).save_pretrained(folder)
    return folder


def cached_hf_config(shape: Qwen3Shape) -> Path:
    """A cached folder holding config.json for ``shape`` (transformers backend, no weights)."""
    import hashlib
    from dataclasses import asdict

    from .assets import cache_dir

    key = hashlib.sha256(json.dumps(asdict(shape), sort_keys=True).encode()).hexdigest()[:12]
    folder = cache_dir() / "hf-configs" / key
    if not (folder / "config.json").exists():
        write_hf_config(shape, folder)
    return folder


def make_random_hf_checkpoint(shape: Qwen3Shape, folder: str | Path, seed: int = 0) -> Path:
    """A randomly initialised Qwen3 saved by transformers itself (for tests and parity)."""
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(hf_config(shape)).eval()
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def expected_shapes(shape: Qwen3Shape) -> dict[str, tuple[int, ...]]:
    """HF parameter name -> shape, for every tensor a Qwen3 checkpoint of ``shape`` holds."""
    s = shape
    q, kv = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
    out: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (s.vocab_size, s.dim),
        "model.norm.weight": (s.dim,),
    }
    if not s.tie_embeddings:
        out["lm_head.weight"] = (s.vocab_size, s.dim)
    for i in range(s.n_layers):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": (s.dim,),
            p + "post_attention_layernorm.weight": (s.dim,),
            p + "self_attn.q_proj.weight": (q, s.dim),
            p + "self_attn.k_proj.weight": (kv, s.dim),
            p + "self_attn.v_proj.weight": (kv, s.dim),
            p + "self_attn.o_proj.weight": (s.dim, q),
            p + "self_attn.q_norm.weight": (s.head_dim,),
            p + "self_attn.k_norm.weight": (s.head_dim,),
        }
        if not s.is_moe:
            out |= {
                p + "mlp.gate_proj.weight": (s.hidden_dim, s.dim),
                p + "mlp.up_proj.weight": (s.hidden_dim, s.dim),
                p + "mlp.down_proj.weight": (s.dim, s.hidden_dim),
            }
            continue
        out[p + "mlp.gate.weight"] = (s.n_experts, s.dim)
        for e in range(s.n_experts):  # the published per-expert layout
            x = f"{p}mlp.experts.{e}."
            out |= {
                x + "gate_proj.weight": (s.moe_hidden_dim, s.dim),
                x + "up_proj.weight": (s.moe_hidden_dim, s.dim),
                x + "down_proj.weight": (s.dim, s.moe_hidden_dim),
            }
    return out


def read_safetensors_header(path: Path) -> dict[str, dict]:
    """Tensor name -> {dtype, shape, data_offsets}; raises if the file is cut or corrupt."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n <= 0 or 8 + n > size:
                raise ValueError(f"header length {n} does not fit in {size} bytes")
            header = json.loads(f.read(n))
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise AssetError(
            f"{path} is not a readable safetensors file ({e}); the download is corrupt or "
            "truncated: delete it and fetch the checkpoint again"
        ) from None
    header.pop("__metadata__", None)
    end = max((t["data_offsets"][1] for t in header.values()), default=0)
    if 8 + n + end != size:
        raise AssetError(
            f"{path} is truncated or padded: its header promises {8 + n + end} bytes, the "
            f"file has {size}; delete it and fetch the checkpoint again"
        )
    return header


def check_hf_checkpoint(folder: str | Path, require_weights: bool = True) -> Qwen3Shape:
    """Check a Hugging Face Qwen3 folder and return its shape; clear errors otherwise."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise AssetError(
            f"checkpoint folder {folder} does not exist; pass a Hugging Face Qwen3 folder "
            "(config.json + *.safetensors)"
        )
    from .errors import ConfigError

    try:
        shape = Qwen3Shape.from_hf_config(folder)
    except ConfigError as e:
        raise AssetError(str(e)) from None
    if not require_weights:
        return shape
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise AssetError(f"{folder} has config.json but no *.safetensors weights")
    found: dict[str, tuple[int, ...]] = {}
    for file in files:
        for name, info in read_safetensors_header(file).items():
            found[name] = tuple(info["shape"])
    expected = expected_shapes(shape)
    wrong = [
        f"{name} {found[name]} (config.json implies {want})"
        for name, want in expected.items()
        if name in found and found[name] != want
    ]
    missing = [name for name in expected if name not in found]
    if shape.tie_embeddings:
        missing = [m for m in missing if m != "lm_head.weight"]
    if wrong or missing:
        detail = "; ".join(wrong[:3] + [f"missing {m}" for m in missing[:3]])
        raise AssetError(
            f"weights in {folder} do not match its config.json: {detail}; the folder mixes "
            "two checkpoints or the config was edited"
        )
    return shape
