"""A wheelhouse's manifest, read and checked on the laptop before anything installs:
every field of the right type, every file present with its size and sha256, nothing a
symbolic link or outside the folder, the target this machine's; then its assets copied
into the cache. scripts/setup.sh runs it (``python -m qwen3_trn_helpers.ops.wheelhouse
verify|install-assets DIR``) before the package is installed: standard library only at
the top. Building one is wheelhouse.py's."""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from ..checksums import sha256_of
from ..errors import AssetError
from ..files import MiB, UnreadableFile, read_json

MANIFEST = "manifest.json"


FORMAT = 1


class WheelhouseError(AssetError):
    """A wheelhouse is missing, incomplete, damaged or for another machine."""


def read_manifest(house: Path) -> dict:
    path = house / MANIFEST
    if not os.path.lexists(path):
        raise WheelhouseError(
            f"{house} has no {MANIFEST}: it is not a wheelhouse (make one on a machine with "
            f"network: qwen3-trn wheelhouse {house})"
        )
    try:  # (a pipe, a device, bytes, JSON nested too deep: files.py names each)
        manifest = read_json(path, limit=64 * MiB, fix="copy the wheelhouse again", want=None)
    except UnreadableFile as e:
        raise WheelhouseError(str(e)) from None
    if not isinstance(manifest, dict):
        raise WheelhouseError(
            f"{path} holds a JSON {type(manifest).__name__}, not a manifest object; "
            f"rebuild it: qwen3-trn wheelhouse {house}"
        )
    if manifest.get("format") != FORMAT:
        raise WheelhouseError(
            f"{path} has format {manifest.get('format')}, this setup reads {FORMAT}; rebuild "
            "the wheelhouse with this checkout's `qwen3-trn wheelhouse`"
        )
    _check_entry_names(manifest, house)
    _check_fields(manifest, house)
    return manifest


def _is_text_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


#: what each field of a manifest must be; a field that is not is one line, never a
#: KeyError or TypeError from inside verify (setup.sh runs it on a stick's manifest)
_FIELDS = {
    "qwen3_trn": ("a version", lambda v: isinstance(v, str) and bool(v)),
    "requirement": ("a requirement", lambda v: isinstance(v, str) and bool(v)),
    "target": ("a platform name", lambda v: isinstance(v, str)),
    "python_version": ("a version like 3.11", lambda v: isinstance(v, str) and bool(v)),
    "markers": (
        "an object with sys_platform and platform_machine",
        lambda v: _is_text_map(v) and {"sys_platform", "platform_machine"} <= set(v),
    ),
}


def _entry_ok(entry: object) -> bool:
    """A file's entry: its size and its sha256."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("bytes"), int)
        and not isinstance(entry.get("bytes"), bool)
        and isinstance(entry.get("sha256"), str)
    )


def _check_fields(manifest: dict, house: Path) -> None:
    """Every field verify and install-assets read is there and of its type."""
    where = house / MANIFEST
    rebuild = f"rebuild it: qwen3-trn wheelhouse {house}"
    for key, (what, ok) in _FIELDS.items():
        if key not in manifest:
            raise WheelhouseError(f"{where} has no {key!r} ({what}); {rebuild}")
        if not ok(manifest[key]):
            raise WheelhouseError(f"{where}: {key!r} is not {what}; {rebuild}")
    optional = {"left_out": _is_text_map, "command": lambda v: isinstance(v, str)}
    for key, ok in optional.items():
        if manifest.get(key) is not None and not ok(manifest[key]):
            raise WheelhouseError(f"{where}: {key!r} is not what a wheelhouse writes; {rebuild}")
    entries = [(f"wheels/{n}", e) for n, e in manifest["wheels"].items()]
    for folder, files in manifest["assets"].items():
        entries += [(f"assets/{folder}/{n}", e) for n, e in files.items()]
    for name, entry in entries:
        if not _entry_ok(entry):
            raise WheelhouseError(
                f"{where}: the entry for {name} is not an object with its bytes and sha256; "
                f"{rebuild}"
            )


def _plain_file(house: Path, sub: str, name: str, rebuild: str) -> Path:
    """``house/sub/name``, refused unless it is a regular file reached through no link:
    a link passes a checksum of whatever it points at, and a wheelhouse is someone
    else's data (a link to any readable file had passed verify)."""
    path = house / sub / name
    for part in (house / sub.split("/")[0], house / sub, path):
        if part.is_symlink():
            raise WheelhouseError(
                f"{part} is a symbolic link; a wheelhouse holds plain files and folders: "
                f"copy it again without links, or rebuild it: {rebuild}"
            )
    if not path.is_file():
        raise WheelhouseError(
            f"the wheelhouse lacks {sub}/{name} (its manifest lists it): copy it again, "
            f"or rebuild it: {rebuild}"
        )
    return path


def _plain_name(name: object) -> bool:
    """A file or folder name that stays in its folder: no separator, no ``..``, no
    control characters, not absolute (on any platform the wheelhouse is copied to)."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(c in name for c in "/\\:")
        and name.isprintable()
    )


def _check_entry_names(manifest: dict, house: Path) -> None:
    """Every manifest entry is a plain name inside its folder, checked before pip runs
    and before anything is copied: a manifest is data from a USB stick, not a script."""
    rebuild = f"rebuild it: qwen3-trn wheelhouse {house}"
    wheels, assets = manifest.get("wheels"), manifest.get("assets")
    if not isinstance(wheels, dict) or not isinstance(assets, dict):
        raise WheelhouseError(f"{house / MANIFEST} lists no wheels or assets; {rebuild}")
    entries = [("wheels", name) for name in wheels]
    for folder, files in assets.items():
        entries.append(("assets", folder))
        if not isinstance(files, dict):
            raise WheelhouseError(
                f"{house / MANIFEST}: assets/{folder!r} is not a list of files; {rebuild}"
            )
        entries += [(f"assets/{folder}", name) for name in files]
    for sub, name in entries:
        if not _plain_name(name):
            raise WheelhouseError(
                f"{house / MANIFEST} lists {sub}/{name!r}, which is not a plain file name "
                f"inside {sub}/ (a path, '..' or a control character): nothing was "
                f"installed; use a wheelhouse you trust, or {rebuild}"
            )


def _inside(folder: Path, path: Path) -> Path:
    """``path`` resolved (links followed), refused unless it lies inside ``folder``."""
    resolved = path.resolve()
    if not resolved.is_relative_to(folder.resolve()):
        raise WheelhouseError(
            f"installing the wheelhouse's assets would write {resolved}, outside the cache "
            f"{folder}: remove the link at {path}, or set QWEN3_TRN_CACHE to another folder"
        )
    return path


def _rebuild_hint(manifest: dict, house: Path) -> str:
    return manifest.get("command") or f"qwen3-trn wheelhouse {house}"


def verify(house: Path) -> dict:
    """Check the wheelhouse against its manifest and this interpreter, before installing:
    a missing or changed file, another Python or another platform is one line naming it
    and how to rebuild. Returns the manifest."""
    house = house.expanduser().absolute()
    manifest = read_manifest(house)
    rebuild = _rebuild_hint(manifest, house)
    if manifest["python_version"] != _host_python():
        raise WheelhouseError(
            f"the wheelhouse {house} is for Python {manifest['python_version']}, this is "
            f"{_host_python()}: run setup with PYTHON=python{manifest['python_version']}, "
            f"or rebuild it with --python-version {_host_python()}"
        )
    want = {k: manifest["markers"][k] for k in ("sys_platform", "platform_machine")}
    have = {k: host_markers()[k] for k in want}
    if want != have:
        raise WheelhouseError(
            f"the wheelhouse {house} is for {manifest['target']} ({want['sys_platform']} "
            f"{want['platform_machine']}), this machine is {have['sys_platform']} "
            f"{have['platform_machine']}: rebuild it with --target for this machine"
        )
    entries = [("wheels", n, e) for n, e in manifest["wheels"].items()]
    entries += [
        (f"assets/{folder}", n, e) for folder, files in manifest["assets"].items()
        for n, e in files.items()
    ]  # fmt: skip
    for sub, name, entry in entries:
        path = _plain_file(house, sub, name, rebuild)
        if path.stat().st_size != entry["bytes"] or sha256_of(path) != entry["sha256"]:
            raise WheelhouseError(
                f"{path} is not the file the wheelhouse was built with (sha256 differs): "
                f"copy it again, or rebuild it: {rebuild}"
            )
    _check_left_out(manifest)
    return manifest


def _check_left_out(manifest: dict) -> None:
    """A wheelhouse built with --skip relies on this venv having those packages."""
    from importlib import metadata

    for name, version in (manifest.get("left_out") or {}).items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have is None or have.split("+")[0] != version.split("+")[0]:
            found = f"has {name} {have}" if have else f"has no {name}"
            raise WheelhouseError(
                f"the wheelhouse leaves out {name} {version} (built with --skip {name}) and "
                f"this Python {found}: install {name}=={version} first, or rebuild the "
                "wheelhouse without --skip"
            )


def install_assets(house: Path) -> list[Path]:
    """Copy the wheelhouse's assets into the cache (``qwen3-trn assets`` verifies them
    afterwards); a folder the cache already holds is left as it is."""
    from ..assets import cache_dir

    house = house.expanduser().absolute()
    manifest = read_manifest(house)
    rebuild = _rebuild_hint(manifest, house)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    placed = []
    for folder, files in manifest["assets"].items():
        target = _inside(cache, cache / folder)
        if folder == "downloads":
            target.mkdir(exist_ok=True)
            for name in files:
                dest = _inside(cache, target / name)
                if not dest.exists() and not dest.is_symlink():
                    source = _plain_file(house, f"assets/{folder}", name, rebuild)
                    shutil.copy2(source, dest)
            continue
        if target.exists():
            print(f"assets: {target} is already there")
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder}-", dir=cache))
        try:
            for name, entry in files.items():
                shutil.copy2(_plain_file(house, f"assets/{folder}", name, rebuild), tmp / name)
                if sha256_of(tmp / name) != entry["sha256"]:
                    raise WheelhouseError(
                        f"copying {folder}/{name} from the wheelhouse gave a different file "
                        f"(sha256); check the disk, or rebuild: {rebuild}"
                    )
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        placed.append(target)
        print(f"assets: {target}")
    return placed


def host_markers() -> dict[str, str]:
    return {
        "sys_platform": sys.platform,
        "platform_system": platform.system(),
        "platform_machine": platform.machine(),
    }


def _host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"
