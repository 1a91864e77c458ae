"""The workshop wheelhouse: built here, installed into a fresh venv with no network.

CI cannot download a second torch (PyPI's Linux torch and its CUDA libraries are 3 GB of
wheels), so the wheelhouse is built with ``--skip torch``: every other wheel is real,
resolved and downloaded as an instructor's would be, as are qwen3-trn's own wheel and the
real assets. The fresh venv sees this test venv's torch (and only what torch needs)
through a .pth file, as a machine with a preinstalled torch would. Then
``scripts/setup.sh --wheelhouse`` installs with every index and proxy pointing at a dead
port, ``qwen3-trn assets --published`` verifies the assets' checksums, and the installed
venv trains two steps from the shipped local checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DEAD = "http://127.0.0.1:9"  # the discard port: nothing answers


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[var] = DEAD
    env.update(
        no_proxy="",
        NO_PROXY="",
        PIP_INDEX_URL=f"{DEAD}/simple",
        PIP_EXTRA_INDEX_URL="",
        PIP_FIND_LINKS="",
        PIP_CONFIG_FILE=os.devnull,
        PIP_RETRIES="0",
        PIP_TIMEOUT="2",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        **extra,
    )
    return env


def _site(venv: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(
        subprocess.check_output([str(venv / "bin" / "python"), "-c", code], text=True).strip()
    )


def _torch_closure() -> set[str]:
    """torch and what it requires here (with the extras asked for), as installed."""
    from packaging.requirements import Requirement

    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [("torch", frozenset())]
    while todo:
        name, extras = todo.pop()
        name = name.lower().replace("_", "-")
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (*extras, "")):
                todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in seen}


def _venv_seeing_only_torch(venv: Path, heavy: Path) -> None:
    """A fresh venv (with pip) that sees this venv's torch and its requirements, and
    nothing else of this venv: a machine whose torch is preinstalled."""
    site = Path(sysconfig.get_paths()["purelib"])
    heavy.mkdir()
    for name in _torch_closure():
        for f in metadata.distribution(name).files or []:
            top = f.parts[0]
            if top != ".." and not (heavy / top).exists() and (site / top).exists():
                (heavy / top).symlink_to(site / top)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    (_site(venv) / "preinstalled_torch.pth").write_text(f"{heavy}\n")


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    house = tmp_path_factory.mktemp("wheelhouse") / "wh"
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers.cli", "wheelhouse", str(house),
         "--extras", "cpu", "--skip", "torch"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return house


def _setup(house: Path, venv: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--wheelhouse", str(house), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=_offline_env(QWEN3_TRN_VENV=str(venv), QWEN3_TRN_CACHE=str(cache)),
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.install
def test_offline_install_from_the_wheelhouse_trains(wheelhouse, tmp_path):
    manifest = json.loads((wheelhouse / "manifest.json").read_text())
    names = {w.split("-")[0].lower() for w in manifest["wheels"]}
    assert {"qwen3_trn", "torchtitan", "transformers", "tokenizers", "datasets"} <= names
    assert not names & {"torch", "triton"} and not any(n.startswith("nvidia") for n in names)
    assert manifest["left_out"] == {"torch": metadata.version("torch").split("+")[0]}
    assert any(f.startswith("published-tiny-") for f in manifest["assets"])

    venv, cache = tmp_path / "venv", tmp_path / "cache"
    _venv_seeing_only_torch(venv, tmp_path / "preinstalled")
    proc = _setup(wheelhouse, venv, cache, "--install-only")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "installing offline" in proc.stdout and "published:" in proc.stdout

    python, cli = venv / "bin" / "python", venv / "bin" / "qwen3-trn"
    env = _offline_env(QWEN3_TRN_CACHE=str(cache))
    code = "import qwen3_trn_helpers, torchtitan; print(qwen3_trn_helpers.__file__)"
    where = subprocess.check_output([str(python), "-c", code], cwd=tmp_path, env=env, text=True)
    assert Path(where.strip()).is_relative_to(venv)  # the wheel, not this checkout
    # the local checkpoint came from the wheelhouse: a 2-step run starts from it, and
    # nothing is pretrained again
    published = next(cache.glob("published-tiny-*"))
    before = (published / "checksums.json").stat().st_mtime_ns
    run = subprocess.run(
        [str(cli), "train", "--steps", "2", "--init", "pretrained", "--out", "run",
         "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "pretraining" not in run.stdout + run.stderr
    assert (published / "checksums.json").stat().st_mtime_ns == before
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    spec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert str(published) in json.dumps(spec)


def _copy(house: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "wh"
    shutil.copytree(house, copy, copy_function=os.link)  # hard links: break a file by
    return copy  # replacing it, never by writing into it


@pytest.mark.slow
@pytest.mark.install
@pytest.mark.parametrize("damage", ["missing wheel", "changed wheel", "missing asset"])
def test_a_damaged_wheelhouse_is_refused_before_pip(wheelhouse, tmp_path, damage):
    house = _copy(wheelhouse, tmp_path)
    if damage == "missing wheel":
        victim = next((house / "wheels").glob("transformers-*.whl"))
        victim.unlink()
        expected = f"the wheelhouse lacks wheels/{victim.name}"
    elif damage == "changed wheel":
        victim = next((house / "wheels").glob("tokenizers-*.whl"))
        data = victim.read_bytes()
        victim.unlink()
        victim.write_bytes(data + b"\0")
        expected = f"{victim} is not the file the wheelhouse was built with"
    else:
        victim = next((house / "assets").glob("qwen3-tokenizer-*")) / "tokenizer.json"
        victim.unlink()
        expected = "the wheelhouse lacks assets/qwen3-tokenizer-"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proc = _setup(house, venv, tmp_path / "cache", "--install-only")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
    assert "rebuild it: qwen3-trn wheelhouse" in lines[0]
    assert "installing" not in proc.stdout  # refused before pip ran


def test_the_wheel_is_built_from_this_checkout():
    """The package's own wheel comes from the checkout's pyproject.toml, found from the
    module's place (it moved once, under ops/, and the path went one folder short)."""
    from qwen3_trn_helpers.ops.wheelhouse import CHECKOUT

    assert CHECKOUT == ROOT and (CHECKOUT / "pyproject.toml").is_file()


def test_select_pins_follows_the_targets_markers():
    """From Linux for a Mac: torch's Linux-only CUDA libraries and triton are not
    wanted; --skip torch leaves out torch and what only it needs, not what others share."""
    from qwen3_trn_helpers.ops.wheelhouse import TARGETS, select_pins, target_markers

    def dist(name, version, *requires):
        return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}}

    report = {
        "install": [
            dist(
                "qwen3-trn",
                "0.2.0",
                "torch==2.14.1; extra == 'cpu'",
                "filelock>=3",
                "jupyterlab; extra == 'notebooks'",
            ),  # fmt: skip
            dist(
                "torch",
                "2.14.1",
                "filelock",
                "sympy",
                "triton~=3.8.0; platform_system == 'Linux'",
                "nvidia-nccl-cu13; platform_system == 'Linux'",
            ),  # fmt: skip
            dist("filelock", "3.20.0"),
            dist("sympy", "1.14.0", "mpmath"),
            dist("mpmath", "1.3.0"),
            dist("triton", "3.8.0"),
            dist("nvidia-nccl-cu13", "2.30.7"),
        ]
    }
    mac = target_markers(TARGETS["macos-arm64"], "3.11")
    keep, left = select_pins(report, "qwen3-trn", ["cpu"], mac, set())
    assert set(keep) == {"qwen3-trn", "torch", "filelock", "sympy", "mpmath"} and not left
    linux = target_markers(TARGETS["linux-x86_64"], "3.11")
    keep, _ = select_pins(report, "qwen3-trn", ["cpu"], linux, set())
    assert {"triton", "nvidia-nccl-cu13"} <= set(keep)
    keep, left = select_pins(report, "qwen3-trn", ["cpu"], linux, {"torch"})
    assert set(keep) == {"qwen3-trn", "filelock"} and left == {"torch": "2.14.1"}


def _bare_venv(path: Path, torch_version: str | None) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    if torch_version:
        dist = _site(path) / f"torch-{torch_version}.dist-info"
        dist.mkdir()
        meta = f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n"
        (dist / "METADATA").write_text(meta)
    return path


@pytest.mark.skipif(sys.platform == "darwin", reason="--cpu-torch changes nothing on macOS")
@pytest.mark.parametrize("case", ["unreachable index", "pypi torch already there"])
def test_cpu_torch_says_what_went_wrong(tmp_path, case):
    import tomllib

    cpu = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pin = next(r for r in cpu["cpu"] if r.startswith("torch==")).removeprefix("torch==")
    venv = _bare_venv(tmp_path / "venv", pin if case != "unreachable index" else None)
    env = _offline_env(QWEN3_TRN_VENV=str(venv), QWEN3_TRN_TORCH_INDEX=f"{DEAD}/whl/cpu")
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--install-only"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    if case == "unreachable index":
        assert f"could not install torch=={pin}+cpu from {DEAD}/whl/cpu" in lines[0]
        assert "without --cpu-torch" in lines[0]
    else:
        assert f"already has torch {pin}" in lines[0] and f"rm -rf {venv}" in lines[0]
