"""Hugging Face Qwen3 folders (config.json + safetensors): make, read and check them.

The same folder format serves three purposes: the published Qwen3 checkpoints on trn2,
the tiny checkpoints tests and CPU notebooks make with transformers, and the config
torchtitan's transformers backend reads (it builds its model from ``config.json``). A
folder is checked before training starts, so a truncated download or a checkpoint of the
wrong shape is a one-line error, not a failure deep inside torchtitan's loader.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from ..errors import AssetError, ConfigError
from ..files import check_regular
from .shapes import Qwen3Shape, native_model_config


def cached_hf_config(shape: Qwen3Shape) -> Path:
    """A cached folder holding only config.json for ``shape`` (transformers backend)."""
    from ..assets import cache_dir, cached_folder

    key = hashlib.sha256(json.dumps(asdict(shape), sort_keys=True).encode()).hexdigest()[:12]
    return cached_folder(
        cache_dir() / "hf-configs" / key,
        lambda folder: shape.hf_config().save_pretrained(folder),
        marker="config.json",
    )


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' tqdm bars off while inside ("Loading weights 0/46", "Writing model
    shards"), then as they were: in a notebook such a bar is noise on stderr, and on a
    static page its first frame stays frozen."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def make_random_hf_checkpoint(shape: Qwen3Shape, folder: str | Path, seed: int = 0) -> Path:
    """A randomly initialised Qwen3 saved by transformers itself (for tests and parity)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(shape.hf_config()).eval()
    folder = Path(folder)
    with no_progress_bars():  # save_pretrained draws one for a one-file checkpoint
        model.save_pretrained(folder)
    return folder


@functools.cache  # built once per shape and process; callers only read it
def expected_shapes(shape: Qwen3Shape) -> dict[str, tuple[int, ...]]:
    """HF parameter name -> shape, for every tensor a Qwen3 checkpoint of ``shape`` holds.

    Asked of torchtitan itself: its Qwen3 built on the meta device (no memory), its
    state dict through its own Hugging Face adapter, the one that loads the weights.
    That gives the published per-expert MoE layout and leaves out a tied lm_head.
    """
    import torch
    from torchtitan.models.qwen3 import Qwen3StateDictAdapter

    config = native_model_config(shape)
    with torch.device("meta"):
        model = config.build()
    hf = Qwen3StateDictAdapter(config, None).to_hf(model.state_dict())
    return {name: tuple(t.shape) for name, t in hf.items()}


def tensor_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor in a safetensors file, read from its header only.

    safetensors itself refuses a file whose header does not cover it exactly, so a
    truncated download is caught here without reading the weights.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(file, "pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except SafetensorError as e:
        raise AssetError(
            f"{file} is not a readable safetensors file ({e}); the download is corrupt or "
            "truncated: delete it and fetch the checkpoint again"
        ) from None


#: safetensors dtypes a model can train from (torchtitan casts them to fp32 on load)
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


def tensor_dtypes(file: Path) -> dict[str, str]:
    """Name -> safetensors dtype ("BF16", "I8", ...) of every tensor, from the header."""
    from safetensors import safe_open

    with safe_open(file, "pt") as f:
        return {name: f.get_slice(name).get_dtype() for name in f.keys()}


def check_hf_checkpoint(folder: str | Path) -> Qwen3Shape:
    """Check a Hugging Face Qwen3 folder and return its shape; clear errors otherwise."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise AssetError(
            f"{folder} is a file; --init takes the checkpoint's folder (config.json + "
            f"*.safetensors), for example {folder.parent}"
        )
    if not folder.is_dir():
        raise AssetError(
            f"checkpoint folder {folder} does not exist; pass a Hugging Face Qwen3 folder "
            "(config.json + *.safetensors)"
        )
    for entry in folder.iterdir():  # what transformers and safetensors open: no pipe, ...
        if entry.suffix in (".json", ".safetensors", ".jinja"):
            check_regular(entry, limit=None, fix="copy the checkpoint folder again")
    try:
        shape = Qwen3Shape.from_hf_config(folder)
    except ConfigError as e:
        raise AssetError(str(e)) from None
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise AssetError(f"{folder} has config.json but no *.safetensors weights")
    found: dict[str, tuple[int, ...]] = {}
    for file in files:
        found |= tensor_shapes(file)
        quantized = {n: d for n, d in tensor_dtypes(file).items() if d not in FLOAT_DTYPES}
        if quantized:
            name, dtype = next(iter(quantized.items()))
            raise AssetError(
                f"{file.name} in {folder} holds {dtype} weights ({name} and "
                f"{len(quantized) - 1} more); training starts from floating-point weights "
                f"({', '.join(FLOAT_DTYPES)}): use the unquantized checkpoint"
            )
    expected = expected_shapes(shape)
    wrong = [
        f"{name} {found[name]} (config.json implies {want})"
        for name, want in expected.items()
        if name in found and found[name] != want
    ]
    missing = [name for name in expected if name not in found]
    if wrong or missing:
        detail = "; ".join(wrong[:3] + [f"missing {m}" for m in missing[:3]])
        raise AssetError(
            f"weights in {folder} do not match its config.json: {detail}; the folder mixes "
            "two checkpoints or the config was edited"
        )
    return shape
