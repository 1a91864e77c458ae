"""Where "published weights" come from: the hub on trn2, a locally made checkpoint on CPU."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError


def resolve_pretrained(variant: str, preset, device_type: str) -> Path:
    """A Hugging Face folder with the preset's published weights."""
    if preset.hub_id is None:
        raise ConfigError(
            f"preset {preset.name!r} has no published checkpoint; pass a folder with --init DIR"
        )
    from .hub import download_checkpoint

    return download_checkpoint(preset.hub_id)
