"""Assets are verified, not just present: a corrupt cached tokenizer, quantized or
misnamed init weights, a wheelhouse entry outside its folder, an installed asset
linking out of the cache (split from test_hostile.py, rounds 3 and 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hostile import one_error_line

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


# --- round 4 (issue 26): a wheelhouse stays in its folder -------------------------------------


def _fake_house(tmp_path: Path, wheels: dict, assets_: dict) -> Path:
    """A wheelhouse for this Python and machine whose manifest lists what a test wants."""
    from qwen3_trn_helpers.ops import wheelhouse

    house = tmp_path / "house"
    (house / "assets" / "downloads").mkdir(parents=True)
    (house / "wheels").mkdir()
    manifest = {
        "format": wheelhouse.FORMAT, "qwen3_trn": "0", "requirement": "qwen3-trn",
        "target": "here", "python_version": wheelhouse._host_python(),
        "markers": wheelhouse.host_markers(), "command": "", "left_out": {},
        "wheels": wheels, "assets": assets_,
    }  # fmt: skip
    (house / "manifest.json").write_text(json.dumps(manifest))
    return house


@pytest.mark.parametrize(
    "where, name",
    [("asset", "../../evil.sh"), ("asset", "/etc/hostname"), ("wheel", "../x.whl"),
     ("folder", ".."), ("asset", "a\nb")],
)  # fmt: skip
def test_a_wheelhouse_entry_is_a_plain_name_inside_its_folder(
    tmp_path, monkeypatch, capsys, where, name
):
    from qwen3_trn_helpers.ops import wheelhouse

    evil = tmp_path / "evil.sh"
    entry = {"bytes": 3, "sha256": "0" * 64}
    files = {name if where == "asset" else "ok.txt": entry}
    house = _fake_house(
        tmp_path,
        {name: entry} if where == "wheel" else {},
        {name if where == "folder" else "downloads": files},
    )
    (house / "assets" / "evil.sh").write_text("rm")  # what ../ would reach from downloads/
    cache = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("QWEN3_TRN_CACHE", str(cache))
    for command in ("verify", "install-assets"):
        assert wheelhouse.main([command, str(house)]) == 1
        line = one_error_line(capsys)
        assert f"{name!r}, which is not a plain file name" in line, line
    assert not evil.exists() and not (tmp_path / "a" / "evil.sh").exists()


def test_installed_assets_never_follow_a_link_out_of_the_cache(tmp_path, monkeypatch, capsys):
    from qwen3_trn_helpers.ops import wheelhouse

    house = _fake_house(tmp_path, {}, {"downloads": {"f.txt": {"bytes": 1, "sha256": "0"}}})
    (house / "assets" / "downloads" / "f.txt").write_text("x")
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir(), outside.mkdir()
    (cache / "downloads").symlink_to(outside)  # a link planted in the cache
    monkeypatch.setenv("QWEN3_TRN_CACHE", str(cache))
    assert wheelhouse.main(["install-assets", str(house)]) == 1
    assert "outside the cache" in one_error_line(capsys)
    assert not (outside / "f.txt").exists()
