"""Wheelhouse manifests are someone else's data: every fault is one line, an entry is a
plain name inside its folder, nothing is a link, and installed assets never follow a
link out of the cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import one_error_line

# --- wheelhouse manifests are data: every fault one line -----------------------------------


def _wheelhouse(tmp_path: Path) -> tuple[Path, dict]:
    """A small but complete wheelhouse for this machine and Python (no pip: one fake
    wheel and one asset, each with its true size and sha256)."""
    from qwen3_trn_helpers.ops import wheelhouse as wh

    house = tmp_path / "house"
    (house / "wheels").mkdir(parents=True)
    (house / "assets" / "tok").mkdir(parents=True)
    wheel = house / "wheels" / "qwen3_trn-0.1-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    asset = house / "assets" / "tok" / "tokenizer.json"
    asset.write_text("{}")

    def entry(p: Path) -> dict:
        return {"bytes": p.stat().st_size, "sha256": wh.sha256_of(p)}

    manifest = {
        "format": wh.FORMAT, "qwen3_trn": "0.1", "commit": None, "requirement": "qwen3-trn",
        "target": wh._host_name(), "markers": wh.host_markers(),
        "python_version": wh._host_python(), "torch_index": None, "left_out": {},
        "command": "", "wheels": {wheel.name: entry(wheel)},
        "assets": {"tok": {asset.name: entry(asset)}},
    }  # fmt: skip
    (house / "manifest.json").write_text(json.dumps(manifest))
    return house, manifest


def _verify(house: Path) -> subprocess.CompletedProcess:
    """What setup.sh runs, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers.ops.wheelhouse", "verify", str(house)],
        capture_output=True, text=True,
    )  # fmt: skip


def test_a_good_wheelhouse_verifies(tmp_path):
    house, _ = _wheelhouse(tmp_path)
    done = _verify(house)
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "qwen3-trn==0.1", done.stderr


def _drop(key):
    def change(m):
        del m[key]

    return change


MANIFEST_FAULTS = {
    "no python_version": (_drop("python_version"), "has no 'python_version'"),
    "no markers": (_drop("markers"), "has no 'markers'"),
    "no requirement": (_drop("requirement"), "has no 'requirement'"),
    "python_version a number": (
        lambda m: m.update(python_version=3.11),
        "'python_version' is not a version",
    ),
    "markers a list": (lambda m: m.update(markers=[]), "'markers' is not an object"),
    "a wheel entry a string": (
        lambda m: m["wheels"].update({next(iter(m["wheels"])): "x"}),
        "the entry for wheels/qwen3_trn-0.1-py3-none-any.whl is not an object",
    ),
    "an asset entry a list": (
        lambda m: m["assets"]["tok"].update({"tokenizer.json": []}),
        "the entry for assets/tok/tokenizer.json is not an object",
    ),
    "bytes a string": (
        lambda m: m["assets"]["tok"]["tokenizer.json"].update(bytes="2"),
        "the entry for assets/tok/tokenizer.json is not an object with its bytes",
    ),
    "left_out a list": (lambda m: m.update(left_out=["torch"]), "'left_out' is not what"),
}


@pytest.mark.parametrize("fault", MANIFEST_FAULTS)
def test_every_manifest_fault_is_one_line(fault, tmp_path):
    house, manifest = _wheelhouse(tmp_path)
    change, words = MANIFEST_FAULTS[fault]
    change(manifest)
    (house / "manifest.json").write_text(json.dumps(manifest))
    done = _verify(house)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1 and err[0].startswith("error: "), done.stderr
    assert words in err[0] and "Traceback" not in done.stderr


def test_a_manifest_that_is_not_an_object_is_one_line(tmp_path):
    house, _ = _wheelhouse(tmp_path)
    for text in ("[]", '"x"', "\udcff"):
        (house / "manifest.json").write_bytes(text.encode("utf-8", "surrogateescape"))
        done = _verify(house)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("where", ["asset", "asset folder", "wheels folder"])
def test_a_link_in_the_wheelhouse_is_refused(where, tmp_path, monkeypatch):
    """An asset that was a link to any readable file passed verify (its checksum is
    the target's)."""
    from qwen3_trn_helpers.ops import wheelhouse as wh

    monkeypatch.setenv("QWEN3_TRN_CACHE", str(tmp_path / "cache"))
    house, manifest = _wheelhouse(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    if where == "asset":
        asset = house / "assets" / "tok" / "tokenizer.json"
        (tmp_path / "secret").write_bytes(asset.read_bytes())  # same bytes: checksum passes
        asset.unlink()
        asset.symlink_to(tmp_path / "secret")
        link = asset
    else:
        folder = house / ("assets/tok" if where == "asset folder" else "wheels")
        shutil.move(folder, elsewhere)
        folder.symlink_to(elsewhere)
        link = folder
    done = _verify(house)
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip() == (
        f"error: {link} is a symbolic link; a wheelhouse holds plain files and folders: "
        f"copy it again without links, or rebuild it: qwen3-trn wheelhouse {house}"
    )
    with pytest.raises(wh.WheelhouseError, match="is a symbolic link"):
        wh.install_assets(house) if where != "wheels folder" else wh.verify(house)


# --- a wheelhouse stays in its folder -------------------------------------


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
