"""What the planner plans: a Qwen3 name or preset, or any Hugging Face ``config.json``.

A published run of another model (torchtitan's Llama 3.1 benchmarks) is replayed from
its config.json: Qwen3, Qwen3-MoE, Llama and Mixtral-style MoE configs are read into a
:class:`~qwen3_trn_helpers.model.shapes.Qwen3Shape` (the numbers the memory and cost
models need). The file is read as JSON, not through transformers, so a Llama config
needs no Llama code; a Llama counted as a Qwen3 of its shape differs by the q/k norms
only (2 x head_dim weights per layer: 8,192 of 8.03 billion at Llama 3.1 8B).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...model.config_check import experts_field, read_config_json
from ...model.shapes import Qwen3Shape, active_parameter_count

#: model_type values read, with the config keys of their experts
ARCHITECTURES = ("qwen3", "qwen3_moe", "llama", "mistral", "mixtral")


@dataclass(frozen=True)
class PlannedModel:
    name: str
    shape: Qwen3Shape
    preset: str | None  # a package preset: its plans print the command that trains it
    architecture: str
    source: str

    @property
    def parameters(self) -> int:
        return self.shape.parameter_count()

    @property
    def active_parameters(self) -> int:
        return active_parameter_count(self.shape)

    def describe(self) -> str:
        """'Qwen3-30B-A3B (30.5 B parameters, 3.3 B active)': the header's first words."""
        text = f"{self.name} ({self.parameters / 1e9:.2f} B parameters"
        if self.shape.is_moe:
            text += f", {self.active_parameters / 1e9:.2f} B active"
        return text + ")"


def load_model(text: str) -> PlannedModel:
    """A published Qwen3 name or preset, or a path to a config.json (or its folder)."""
    path = Path(text).expanduser()
    if text.endswith(".json") or path.is_dir() or "/" in text and path.exists():
        return from_config_json(path)
    from ...model.family import FAMILY, find_model
    from ...model.presets import get_preset

    preset = get_preset(find_model(text))
    name = next((m.name for m in FAMILY.values() if m.preset == preset.name), preset.name)
    arch = "qwen3_moe" if preset.shape.is_moe else "qwen3"
    return PlannedModel(name, preset.shape, preset.name, arch, f"preset {preset.name}")


def from_config_json(path: Path) -> PlannedModel:
    """Read a Hugging Face config.json into the planner's shape (see the module docstring),
    its numbers checked first (model/config_check.py)."""
    file = path / "config.json" if path.is_dir() else path
    fix = "--model takes a Qwen3 name or a model's config.json"
    cfg = read_config_json(file, ARCHITECTURES, training=False, fix=fix)
    arch = cfg["model_type"]
    dim = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or dim // heads
    moe = {}
    if arch in ("qwen3_moe", "mixtral"):
        experts_key = experts_field(cfg)
        expert_dim_key = "moe_intermediate_size" if arch == "qwen3_moe" else "intermediate_size"
        moe = dict(
            n_experts=cfg[experts_key],
            top_k=cfg["num_experts_per_tok"],
            moe_hidden_dim=cfg[expert_dim_key],
        )
    shape = Qwen3Shape(
        dim=dim,
        n_layers=cfg["num_hidden_layers"],
        n_heads=heads,
        n_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        hidden_dim=cfg["intermediate_size"],
        vocab_size=cfg["vocab_size"],
        max_seq_len=min(cfg.get("max_position_embeddings", 4096), 262144),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        **moe,
    )
    name = cfg.get("_name_or_path") or file.parent.name
    return PlannedModel(str(name), shape, None, arch, str(file))
