"""scripts/setup.sh from an activated Neuron venv: its torch is used, none is installed.

A stand-in Neuron venv (no Trainium needed): a venv that sees a torch (this test venv's,
through a .pth file) and holds a dummy ``torch_neuronx`` package with a version.
"""

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.long]  # each runs setup.sh in a venv of its own


def _site(python: Path) -> Path:
    out = subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True,
    )
    return Path(out.strip())


@pytest.fixture(scope="module")
def neuron_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("neuron")
    venv = root / "aws_neuronx_venv_torch_neuronx_2_14"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = _site(venv / "bin" / "python")
    (site / "test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    package = site / "torch_neuronx"
    package.mkdir()
    (package / "__init__.py").write_text('"""stand-in: no Neuron code."""\n')
    dist = site / "torch_neuronx-2.14.3.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch-neuronx\nVersion: 2.14.3.0\n"
    )
    compiler_dist = site / "neuronx_cc-2.28.7631.0.dist-info"  # Neuron SDK 2.33's
    compiler_dist.mkdir()
    (compiler_dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: neuronx-cc\nVersion: 2.28.7631.0\n"
    )
    compiler = venv / "bin" / "neuronx-cc"  # the Neuron compiler lives in the venv's bin
    compiler.write_text("#!/bin/sh\necho stand-in neuronx-cc\n")
    compiler.chmod(0o755)
    return venv


def _setup_env(neuron_venv: Path, target: Path, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHON": str(neuron_venv / "bin" / "python"),
        "VIRTUAL_ENV": str(neuron_venv),
        "QWEN3_TRN_VENV": str(target),
        "PIP_DRY_RUN_REPORT": str(tmp_path / "report.json"),
    }


def test_setup_reuses_the_neuron_venvs_torch(neuron_venv, tmp_path):
    import torch

    target = tmp_path / "project-venv"
    env = _setup_env(neuron_venv, target, tmp_path)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--install-only"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Neuron venv detected" in proc.stdout
    python = target / "bin" / "python"
    seen = subprocess.check_output(
        [
            str(python),
            "-c",
            "import torch, torch_neuronx; print(torch.__version__, torch.__file__)",
        ],
        text=True,
    ).split()
    assert seen[0] == torch.__version__  # the Neuron venv's torch, not a new one
    assert not Path(seen[1]).is_relative_to(target)  # nothing installed into .venv
    # torch-neuronx finds the compiler on PATH: .venv/bin has it without the Neuron venv
    assert (target / "bin" / "neuronx-cc").resolve() == (neuron_venv / "bin" / "neuronx-cc")
    from importlib import metadata

    pins = (target / "neuron-constraints.txt").read_text().splitlines()
    assert pins == [f"torch=={metadata.version('torch')}", "torch-neuronx==2.14.3.0",
                    f"numpy=={metadata.version('numpy')}"]  # fmt: skip
    # what pip would install for the package now: never a torch
    report = tmp_path / "dry.json"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report),
         "-c", str(target / "neuron-constraints.txt"), "-e", f"{ROOT}[notebooks,test,neuron]"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "torch" not in names and "torch-neuronx" not in names
    # triton: torchtitan 0.3.0 imports it, the Neuron torch build lacks it
    assert "-e .[notebooks,test,neuron]" in proc.stdout
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("triton") for r in extras["optional-dependencies"]["neuron"])


def test_setup_refuses_a_cpu_venv_that_would_hide_the_neuron_torch(neuron_venv, tmp_path):
    """A .venv from the CPU quick start has its own torch, first on sys.path."""
    target = tmp_path / "cpu-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    (_site(target / "bin" / "python") / "torch").mkdir()
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--install-only"],
        cwd=ROOT, env=_setup_env(neuron_venv, target, tmp_path), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "has its own torch" in proc.stderr and f"rm -rf {target}" in proc.stderr


def _prepared_venv(
    target: Path, stamp_inputs: bytes, cli_status: str, extras: str = "cpu,notebooks,test"
) -> Path:
    """A project venv as a previous install left it (stamp current, so setup skips pip),
    whose ``qwen3-trn`` is a stand-in that records its arguments: this tests setup's
    order of steps, not our CLI (other tests cover that)."""
    import hashlib

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    stamp_inputs += f"checkout: {ROOT}\n".encode()  # the editable install's folder
    (target / ".qwen3-trn-installed").write_text(
        hashlib.sha256(stamp_inputs).hexdigest() + "\n" + extras + "\n"
    )
    calls = target / "calls.txt"
    stand_in = target / "bin" / "qwen3-trn"
    stand_in.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$1" in smoke) exit {cli_status};; esac\nexit 0\n'
    )
    stand_in.chmod(0o755)
    return calls


def _cpu_stamp() -> bytes:
    """What a CPU install's stamp hashes: pyproject.toml and the lockfile it installs
    the pins of (requirements/cpu.lock)."""
    return (ROOT / "pyproject.toml").read_bytes() + (
        ROOT / "requirements" / "cpu.lock"
    ).read_bytes()


def _neuron_stamp() -> bytes:
    from importlib import metadata

    pins = (f"torch=={metadata.version('torch')}\ntorch-neuronx==2.14.3.0\n"
            f"numpy=={metadata.version('numpy')}\n")  # fmt: skip
    return (ROOT / "pyproject.toml").read_bytes() + pins.encode()


@pytest.mark.parametrize("ladder_status", [0, 1])
def test_setup_on_trn2_climbs_the_ladder_instead_of_training(neuron_venv, tmp_path, ladder_status):
    target = tmp_path / "project-venv"
    calls = _prepared_venv(target, _neuron_stamp(), str(ladder_status), "notebooks,test,neuron")
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")],
        cwd=ROOT, env=_setup_env(neuron_venv, target, tmp_path), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert "installing:" not in proc.stdout  # the stamp was current: no pip here
    steps = calls.read_text().splitlines()
    assert steps == ["assets", "smoke --no-full-size --out smoke"]  # never `train`
    assert proc.returncode == ladder_status, proc.stdout + proc.stderr
    if ladder_status:
        assert "attach smoke/smoke.json" in proc.stderr
    else:
        assert "qwen3-trn smoke --rung 4b_native_64ranks" in proc.stdout
        # then the main job a CPU setup runs, the same command: on trn2 the real sizes
        assert f"then: {target}/bin/qwen3-trn {MAIN_JOB}   (the main job" in proc.stdout


#: setup's main job (scripts/setup.sh main_job): the seed's experiment, published weights
#: against random init; without --overwrite, so setup run again keeps the finished runs
MAIN_JOB = "reproduce --variant native --out runs/reproduce --brief"


def test_setup_on_a_cpu_runs_the_seed_experiment_and_run_again_picks_up(tmp_path):
    """The main job fails once (a stand-in CLI: its one error line is setup's last);
    setup run again installs nothing and asks the same command, which keeps what
    finished (test_reproduce.py's Ctrl-C test runs that for real), then names the next
    step."""
    target = tmp_path / "cpu-project-venv"
    calls = _prepared_venv(target, _cpu_stamp(), "1")
    failed_once = target / "failed-once"
    (target / "bin" / "qwen3-trn").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'if [ "$1" = reproduce ] && [ ! -e {failed_once} ]; then\n'
        f"  touch {failed_once}; echo 'interrupted: no run finished yet; the same command "
        "again picks up there' >&2; exit 130\nfi\nexit 0\n"
    )
    env = {**os.environ, "PYTHON": sys.executable, "QWEN3_TRN_VENV": str(target)}

    def setup() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "setup.sh")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    stopped = setup()
    assert stopped.returncode == 130
    assert stopped.stderr.strip().splitlines()[-1].startswith("interrupted: ")  # the last line
    assert "next:" not in stopped.stdout
    again = setup()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Neuron venv detected" not in again.stdout
    assert "installing:" not in again.stdout  # the install was complete: kept
    assert calls.read_text().splitlines() == ["assets", MAIN_JOB] * 2  # the same command
    assert again.stdout.strip().splitlines()[-1] == (
        f"next: the course, notebooks 00 to 06: {target}/bin/jupyter lab notebooks/ (start "
        "with 00_preflight.ipynb; 03 explains this figure)"
    )


DEAD = "http://127.0.0.1:9"  # the discard port: nothing answers


def test_a_first_install_without_network_is_one_line_and_keeps_no_stamp(tmp_path):
    """No package index (every index and proxy at a dead port): uv cannot be fetched, and
    pip then cannot install the package. The end is one error line naming the fix; the
    install stamp is not written, so setup run again installs (picks up there)."""
    target = tmp_path / "venv"
    mine = ("PIP_", "UV_", "PYTHONPATH", "VIRTUAL_ENV")  # nothing of this machine's pip
    env = {k: v for k, v in os.environ.items() if not k.startswith(mine)}
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[var] = DEAD
    env.update(
        PYTHON=sys.executable, QWEN3_TRN_VENV=str(target), PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=f"{DEAD}/simple", PIP_RETRIES="0", PIP_TIMEOUT="2",
        UV_CACHE_DIR=str(tmp_path / "uv-cache"), QWEN3_TRN_CACHE=str(tmp_path / "cache"),
        no_proxy="", NO_PROXY="",
    )  # fmt: skip
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: pip could not install the package (ERROR: ")
    assert "or install offline: scripts/setup.sh --wheelhouse DIR" in lines[0]
    assert f"rerun scripts/setup.sh (pip's output: {target}/pip-install.log)" in lines[0]
    assert "note: could not install uv==" in proc.stdout  # uv first: one note line
    assert "Retrying" not in proc.stdout + proc.stderr  # pip's noise stays in the log
    assert (target / "bin" / "python").exists()  # the venv is kept for the next run
    assert not (target / ".qwen3-trn-installed").exists()  # which then installs
    assert not (tmp_path / "cache").exists()  # nothing past the install ran


def test_site_after_a_plain_install_installs_the_site_extra(tmp_path):
    """CI runs the plain suite, then `scripts/test.sh --site` in the same .venv: the stamp
    of the plain install is current, yet Sphinx is not there. Setup must see the lacking
    extra (it once skipped pip, and the site build failed: "No module named sphinx"), and
    a plain setup afterwards must not reinstall."""
    import hashlib

    target = tmp_path / "cpu-project-venv"
    _prepared_venv(target, _cpu_stamp(), "0")
    asked = target / "pip-args.txt"
    pip = _site(target / "bin" / "python") / "pip"
    pip.mkdir()
    (pip / "__init__.py").write_text("")
    (pip / "__main__.py").write_text(  # a stand-in pip: records what it was asked
        f"import sys\nopen({str(asked)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
    )
    # (pip installs here, not uv: the stand-in records pip's arguments; which extras are
    # asked for does not depend on the installer)
    env = {**os.environ, "PYTHON": sys.executable, "QWEN3_TRN_VENV": str(target),
           "QWEN3_TRN_INSTALLER": "pip"}  # fmt: skip

    def setup(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "setup.sh"), "--install-only", *flags],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    plain = setup()
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert not asked.exists()  # the stamp was current for the plain extras: no pip
    site = setup("--site")
    assert site.returncode == 0, site.stdout + site.stderr
    assert asked.read_text().split() == [
        "install", "--quiet", "--no-compile", "-c", f"{target}/cpu-lock-pins.txt", "-e",
        ".[cpu,notebooks,test,site]",
    ]  # fmt: skip
    # the lock's pins, without the hashes (pip would then demand one for every package)
    pins = (target / "cpu-lock-pins.txt").read_text()
    assert "torch==2.14.1" in pins and "--hash" not in pins and "\\" not in pins
    again = setup()
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(asked.read_text().splitlines()) == 1  # site is a superset: no second pip
    # the same venv used from another checkout (CI's venv outside the repository, kept
    # between clones): its editable install points at the old folder, so pip runs again
    stamp = target / ".qwen3-trn-installed"
    inputs = _cpu_stamp() + b"checkout: /elsewhere/qwen3-trn\n"
    stamp.write_text(hashlib.sha256(inputs).hexdigest() + "\ncpu,notebooks,test,site\n")
    moved = setup()
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert len(asked.read_text().splitlines()) == 2


HOSTILE_CERT = "/tmp/$(touch {pwned}) 'q\"`id`/../ca.pem"


@pytest.mark.parametrize("case", ["plain", "hostile value", "proxy"])
def test_the_default_install_goes_through_uv_unless_a_pip_setting_forbids_it(tmp_path, case):
    """Off the Neuron venv, the package installs through uv (bootstrapped by pip, its
    cache in the venv, pip's settings passed on, each value one argument and never run);
    a pip setting uv lacks (here a proxy) keeps pip, and setup says which in one line.
    Stand-ins for pip and uv record what they were asked: which packages resolve is
    test_installer.py's part."""
    target = tmp_path / "venv"
    _prepared_venv(target, b"the stamp of an older pyproject.toml", "0")
    asked = target / "asked.txt"
    pwned = tmp_path / "pwned"
    cert = HOSTILE_CERT.format(pwned=pwned)
    listed = {
        "plain": "",
        "hostile value": f":env:.cert={cert!r}",
        "proxy": ":env:.proxy='http://proxy.example:3128'",
    }[case]
    pip = _site(target / "bin" / "python") / "pip"
    pip.mkdir()
    (pip / "__init__.py").write_text("")
    (pip / "__main__.py").write_text(
        "import json, sys\n"
        f"open({str(asked)!r}, 'a').write(json.dumps(['pip', *sys.argv[1:]]) + '\\n')\n"
        f"if sys.argv[1:3] == ['config', 'list']: print({listed!r})\n"
    )
    uv = target / "bin" / "uv"
    uv.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(asked)!r}, 'a').write(json.dumps(['uv', *sys.argv[1:],"
        " 'cache=' + os.environ['UV_CACHE_DIR']]) + '\\n')\n"
    )
    uv.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("UV_CACHE_DIR", "QWEN3_TRN_INSTALLER")}
    env.update(PYTHON=sys.executable, QWEN3_TRN_VENV=str(target))
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--install-only"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [json.loads(line) for line in asked.read_text().splitlines()]
    package = ["-c", f"{target}/cpu-lock-pins.txt", "-e", ".[cpu,notebooks,test]"]
    if case != "proxy":
        assert calls[:2] == [
            ["pip", "config", "list"], ["pip", "install", "--quiet", "--no-compile", "uv==0.13.9"]
        ]  # fmt: skip
        settings = ["--cert=" + cert] if case == "hostile value" else []
        assert calls[2] == [
            "uv", "pip", "install", "--quiet", "--python", str(target / "bin" / "python"),
            "--index-strategy=unsafe-best-match", *settings, *package,
            f"cache={target}/.uv-cache",
        ]  # fmt: skip
        assert len(calls) == 3  # pip never installs the package itself
        assert not pwned.exists()  # the value was data, never a command
    else:
        assert calls == [
            ["pip", "config", "list"], ["pip", "install", "--quiet", "--no-compile", *package]
        ]  # fmt: skip
        notes = [line for line in done.stdout.splitlines() if line.startswith("note: pip's")]
        assert notes == [
            "note: pip's configuration sets proxy, which setup does not pass to uv; "
            "installing with pip (the same packages, about 3x slower)"
        ]


def test_an_unknown_installer_is_one_error_line_before_anything_is_made(tmp_path):
    env = {**os.environ, "QWEN3_TRN_INSTALLER": "$(id)", "QWEN3_TRN_VENV": str(tmp_path / "v")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--install-only"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: QWEN3_TRN_INSTALLER is $(id); set it to uv (the default) or pip"
    ]
    assert not (tmp_path / "v").exists()


@pytest.fixture
def small_disk(tmpfs):
    """A 40 MiB tmpfs: room for the tokenizer and corpus, not for making the local
    checkpoint."""
    return tmpfs("40m")


def test_a_full_disk_while_the_main_job_makes_the_checkpoint_is_one_line(small_disk, tmp_path):
    """A real ENOSPC: the asset cache has room for the tokenizer and the corpus, and the
    local checkpoint's export (81 MB) fills it after 40 steps of pretraining. The main job
    ends in one line that says where and what to do, and keeps nothing half-made."""
    import shutil

    from qwen3_trn_helpers.assets import ensure_tokenizer
    from qwen3_trn_helpers.data.corpus import embedded_corpus_path

    cache = small_disk / "cache"
    cache.mkdir()
    for folder in (ensure_tokenizer(), embedded_corpus_path().parent):  # as setup built them
        shutil.copytree(folder, cache / folder.name)
    out = tmp_path / "rep"
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", *MAIN_JOB.split()[:-3], "--out", str(out),
         "--brief", "--no-progress"],
        cwd=tmp_path, env={**os.environ, "QWEN3_TRN_CACHE": str(cache), "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(
        f"error: the disk is full where the local 'tiny' checkpoint is made ({cache}: "
    )
    assert lines[0].endswith(
        "then run the same command again; it is made anew, nothing half-made is kept"
    )
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == sorted(
        [ensure_tokenizer().name, embedded_corpus_path().parent.name]
    )
    assert not [p for p in cache.iterdir() if p.name.startswith(".published-")
                and not p.name.endswith(".lock")]  # fmt: skip
    assert not (out / "summary.json").exists() and proc.stdout == ""
