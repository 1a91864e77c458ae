"""The one place this package may touch the Hugging Face hub: real weights, on request."""

from __future__ import annotations

from pathlib import Path

from ..errors import AssetError


def download_checkpoint(repo_id: str) -> Path:
    """Download (or find in the HF cache) a model's config, weights and tokenizer."""
    from huggingface_hub import is_offline_mode, snapshot_download

    patterns = ["*.json", "*.safetensors", "tokenizer*", "*.txt"]
    offline = is_offline_mode()
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=offline))
    except Exception as e:
        hint = (
            "HF_HUB_OFFLINE is set: unset it to download, or download once elsewhere and "
            "pass --init DIR"
            if offline
            else "check the network and `huggingface-cli login`, or pass --init DIR"
        )
        raise AssetError(
            f"could not get {repo_id} from the hub ({type(e).__name__}); {hint}"
        ) from None
