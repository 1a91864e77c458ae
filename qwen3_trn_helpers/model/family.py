"""The published Qwen3 family: each model's name, preset and the model card's figures.

The figures are what each model card on the hub states ("Number of Parameters",
"Number of Parameters (Non-Embedding)", and for the MoE models "Number of Activated
Parameters"), in billions as printed there. A test builds every shape with torchtitan
on the meta device and checks its count rounds to the card's figure: the shapes are
the published ones, not guesses. Plain data: cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class PublishedModel:
    name: str  # as Qwen publishes it: "Qwen3-8B"
    preset: str  # this package's preset of that shape
    hub_id: str  # the model card
    total_b: float  # "Number of Parameters", billions, as printed
    non_embedding_b: float  # "Number of Parameters (Non-Embedding)"
    activated_b: float | None = None  # MoE: "Number of Activated Parameters"


FAMILY: dict[str, PublishedModel] = {
    m.name: m
    for m in (
        PublishedModel("Qwen3-0.6B", "0.6b", "Qwen/Qwen3-0.6B", 0.6, 0.44),
        PublishedModel("Qwen3-1.7B", "1.7b", "Qwen/Qwen3-1.7B", 1.7, 1.4),
        # the 4b preset is Qwen3-4B-Instruct-2507: Qwen3-4B's architecture and counts,
        # RoPE theta 5e6 instead of 1e6 (AWS's recipe trained the 2507 checkpoint)
        PublishedModel("Qwen3-4B", "4b", "Qwen/Qwen3-4B", 4.0, 3.6),
        PublishedModel("Qwen3-8B", "8b", "Qwen/Qwen3-8B", 8.2, 6.95),
        PublishedModel("Qwen3-14B", "14b", "Qwen/Qwen3-14B", 14.8, 13.2),
        PublishedModel("Qwen3-32B", "32b", "Qwen/Qwen3-32B", 32.8, 31.2),
        PublishedModel("Qwen3-30B-A3B", "30b-a3b", "Qwen/Qwen3-30B-A3B", 30.5, 29.9, 3.3),
        PublishedModel("Qwen3-235B-A22B", "235b-a22b", "Qwen/Qwen3-235B-A22B", 235.0, 234.0, 22.0),
    )
}


def find_model(name: str) -> str:
    """A preset name from a published name ("Qwen3-8B", any case) or a preset name."""
    from .presets import PRESETS

    if name in PRESETS:
        return name
    for model in FAMILY.values():
        if name.lower() in (model.name.lower(), model.hub_id.lower()):
            return model.preset
    known = ", ".join([*FAMILY, *PRESETS])
    raise ConfigError(f"unknown model {name!r}; choose one of {known}")
