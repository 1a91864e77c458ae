"""Setup run again picks up where a killed one stopped: the asset cache (issue 49)."""

from __future__ import annotations

from qwen3_trn_helpers.assets import cached_folder


def test_a_killed_builds_temporary_folder_is_removed_by_the_next_build(tmp_path):
    """SIGKILL (the OOM killer) skips the build's own clean-up; the next build, holding
    the lock, removes what it left (a checkpoint's is 80 MB) and builds anew."""
    target = tmp_path / "published-tiny-0123abcd"
    stale = tmp_path / ".published-tiny-0123abcd-k1ll3d"
    stale.mkdir()
    (stale / "model-00001-of-00001.safetensors").write_bytes(b"half")
    other = tmp_path / ".published-tiny_moe-4567ef-building"  # another asset's: not ours
    other.mkdir()

    def build(folder):
        (folder / "marker.json").write_text("{}")

    assert cached_folder(target, build, "marker.json") == target
    assert (target / "marker.json").exists()
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        ".published-tiny_moe-4567ef-building",
        "published-tiny-0123abcd",
    ]
