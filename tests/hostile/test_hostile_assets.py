"""Assets are verified, not just present: a corrupt cached tokenizer, an unreadable
tokenizer file, quantized init weights, a file given where a checkpoint folder goes."""

from __future__ import annotations

import shutil

import pytest

from qwen3_trn_helpers import assets
from qwen3_trn_helpers.errors import AssetError
from qwen3_trn_helpers.model.hf_checkpoint import check_hf_checkpoint

# --- assets are verified, not just present -------------------------------------------------


def test_a_corrupt_cached_tokenizer_is_rebuilt(tmp_path, monkeypatch, tokenizer_dir, capsys):
    cache = tmp_path / "cache"
    shutil.copytree(assets.cache_dir() / "downloads", cache / "downloads")  # the pinned wheel
    shutil.copytree(tokenizer_dir, cache / tokenizer_dir.name)
    monkeypatch.setenv("QWEN3_TRN_CACHE", str(cache))
    broken = cache / tokenizer_dir.name / "tokenizer.json"
    broken.write_text(broken.read_text()[:1000])  # truncated
    folder = assets.ensure_tokenizer()
    assert "is damaged (tokenizer.json does not match" in capsys.readouterr().err
    assert assets.sha256_of(folder / "tokenizer.json") == assets.sha256_of(
        tokenizer_dir / "tokenizer.json"
    )


def test_an_unreadable_tokenizer_file_names_the_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    with pytest.raises(AssetError, match=r"tokenizer.json is not a readable tokenizer"):
        assets.load_tokenizer(tmp_path)


def test_quantized_init_weights_are_refused(tmp_path, tiny_hf_checkpoint):
    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "int8"
    shutil.copytree(tiny_hf_checkpoint, folder)
    file = next(folder.glob("*.safetensors"))
    tensors = load_file(file)
    tensors = {k: v.to(torch.int8) for k, v in tensors.items()}
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(AssetError, match="holds I8 weights"):
        check_hf_checkpoint(folder)


def test_a_file_given_as_init_is_named_as_a_file(tiny_hf_checkpoint):
    with pytest.raises(AssetError, match="is a file; init takes the checkpoint's folder"):
        check_hf_checkpoint(tiny_hf_checkpoint / "config.json")
