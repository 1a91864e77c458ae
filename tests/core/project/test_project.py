"""Project hygiene: metadata agrees, notebooks are clean, code is ruff clean."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower()


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    expected = set(project["dependencies"]) | {
        r for name in ("cpu", "notebooks", "test") for r in extras[name]
    }
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {r for r in pip if not r.startswith("-e")}
    assert {_norm(r) for r in listed} == {_norm(r) for r in expected}
    py = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert py.split("=")[1] >= project["requires-python"].lstrip(">=")


def test_notebooks_exist_in_order():
    names = [p.stem for p in NOTEBOOKS]
    assert names == [
        "00_preflight",
        "01_device_registration",
        "02_three_variants",
        "03_ten_step_run",
        "04_scaling_to_trn2",
        "05_several_nodes",
        "06_graph_capture",
    ]


MAGIC = re.compile(r"^\s*[!%]", re.M)
ABS_PATH = re.compile(r"(/home/|/root/|/Users/|/work/|/tmp/|[A-Z]:\\\\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_lint(path: Path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    cells = nb["cells"]
    for cell in cells:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name}: stored outputs"
            assert cell.get("execution_count") is None
            # a failing !cmd or %magic does not fail nbval, so none are allowed
            assert not MAGIC.search(src), f"{path.name}: shell escape or magic in {src!r}"
        assert not ABS_PATH.search(src), f"{path.name}: absolute path in {src[:80]!r}"
        # a folder that outlives the kernel: each run of 03 once left 309 MB in /tmp
        assert "mkdtemp" not in src, f"{path.name}: use lessons.scratch_folder"
    first = "".join(cells[0]["source"])
    assert first.startswith("# ") and "**Goal.**" in first and "Expected time" in first
    # the exercises (ending with how to shut the kernel down), the self-check, the sources
    exercises, last = "".join(cells[-4]["source"]), "".join(cells[-1]["source"])
    assert "## Exercises" in exercises and "shut" in exercises.lower()
    assert last.startswith("## References") and "https://" in last
    solution = re.search(r"notebooks/solutions/(s\d\d_\w+\.py)", exercises)
    assert solution and (ROOT / "notebooks/solutions" / solution.group(1)).exists()


def test_a_notebooks_scratch_folder_goes_with_its_kernel():
    """The folder a notebook trains into stays while the kernel runs (even when the
    notebook keeps only the Path); it is gone once the kernel exits, and a kernel killed
    outright (as nbval stops kernels) leaves it only until that notebook's next run."""
    import signal

    script = (
        "import gc, os, signal, sys\n"
        "from qwen3_trn_helpers.lessons import scratch_folder\n"
        "work = scratch_folder('97')\n"
        "(work / 'rep').mkdir()\n"
        "(work / 'rep' / 'weights.bin').write_bytes(b'0' * 1024)\n"
        "gc.collect()\n"
        "assert (work / 'rep' / 'weights.bin').exists()\n"
        "print(work, flush=True)\n"
        "if sys.argv[1] == 'kill': os.kill(os.getpid(), signal.SIGKILL)\n"
    )

    def kernel(end: str) -> tuple[Path, int]:
        proc = subprocess.run([sys.executable, "-c", script, end], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        return Path(proc.stdout.strip()), proc.returncode

    work, status = kernel("exit")
    assert status == 0 and work.name.startswith("qwen3-trn-97-") and not work.exists()
    killed, status = kernel("kill")
    assert status == -signal.SIGKILL and (killed / "rep" / "weights.bin").exists()
    live = killed.parent / f"qwen3-trn-97-{os.getpid()}-live"  # a running kernel's
    other = killed.parent / "qwen3-trn-970-1-other"  # another notebook's
    try:
        live.mkdir()
        other.mkdir()
        again, status = kernel("exit")  # the notebook's next run
        assert status == 0 and not again.exists()
        assert not killed.exists() and live.exists() and other.exists()
    finally:
        for folder in (killed, live, other):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (Path(sys.prefix) / "bin/ruff").exists(),
    reason="ruff not installed",
)
def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.prefix) / "bin/ruff")
    for args in (["check"], ["format", "--check"]):
        proc = subprocess.run([ruff, *args, "."], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_steps_after_the_readme_command_start_no_test_past_their_budget(tmp_path):
    """.ci/run's budget (conftest.py, QWEN3_TRN_START_TESTS_BEFORE): past it, a test is
    skipped, saying why; before it, or unset, the test runs."""
    import time

    (tmp_path / "test_one.py").write_text("def test_runs():\n    assert True\n")
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")

    def outcome(deadline: float | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "QWEN3_TRN_START_TESTS_BEFORE"}
        if deadline is not None:
            env["QWEN3_TRN_START_TESTS_BEFORE"] = str(deadline)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
             "-p", "no:xdist", "-p", "no:nbval", str(tmp_path)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return proc.stdout

    assert "1 passed" in outcome(None) and "1 passed" in outcome(time.time() + 600)
    late = outcome(time.time() - 1)
    assert "1 skipped" in late and "past this CI step's time budget" in late
    assert "QWEN3_TRN_START_TESTS_BEFORE" in (ROOT / ".ci" / "run").read_text()


def test_a_passing_runs_temporary_folders_are_not_kept(tmp_path):
    """The suite writes about 16 GB of run folders and checkpoints under pytest's
    temporary folder; pytest's default keeps the last three runs' (which filled a shared
    disk here). Under the project's settings a passing test's folder is removed."""
    tests = tmp_path / "inner"
    tests.mkdir()
    (tests / "test_writes.py").write_text(
        "def test_writes(tmp_path):\n"
        "    (tmp_path / 'checkpoint').write_bytes(b'x' * 1024)\n"
        "    print('TMP', tmp_path)\n"
    )
    env = {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(tmp_path / "root")}
    (tmp_path / "root").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:xdist", "-p", "no:cacheprovider",
         "-p", "no:nbval", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tests),
         str(tests)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = Path(next(ln for ln in proc.stdout.splitlines() if "TMP " in ln).split("TMP ", 1)[1])
    assert written.is_relative_to(tmp_path / "root")
    assert not written.exists()


def test_the_suite_hands_out_its_longest_files_first():
    """conftest.py orders files by tests/file-seconds.json, longest first, and keeps each
    file's own order (a notebook's cells). (The pytest children here and above leave
    nbval out: its import costs 2 s of CPU a process, and they collect no notebook.)"""
    table = json.loads((ROOT / "tests" / "file-seconds.json").read_text())["files"]
    assert table["tests/core/training/test_checkpoint_recovery.py"] > 30  # the table is real
    shorter, longer = sorted(
        ["tests/core/project/test_architecture.py", "tests/core/project/test_project.py"],
        key=lambda path: table[path],
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
         "-p", "no:cacheprovider", "-p", "no:nbval", shorter, longer],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    files = list(dict.fromkeys(i.split("::", 1)[0] for i in ids))
    assert files == [longer, shorter]
    own_order = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
         "-p", "no:cacheprovider", "-p", "no:nbval", "--noconftest", longer],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert [i for i in ids if i.startswith(longer)] == [
        line for line in own_order.stdout.splitlines() if "::" in line
    ]


def _root_conftest():
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_temporary_folders_go_to_memory_only_where_it_has_room(tmp_path):
    """conftest.py sends pytest's temporary folders to /dev/shm on a machine with room,
    and leaves them on disk where memory is short or the folder is not there."""
    conftest = _root_conftest()
    rich = tmp_path / "meminfo"
    rich.write_text("MemTotal: 67108864 kB\nMemAvailable: 33554432 kB\n")  # 32 GiB
    poor = tmp_path / "meminfo-poor"
    poor.write_text("MemTotal: 8388608 kB\nMemAvailable: 4194304 kB\n")  # 4 GiB
    assert conftest.in_memory_temproot(str(tmp_path / "absent"), str(rich)) is None
    assert conftest.in_memory_temproot("/dev/shm", str(poor)) is None
    assert conftest.in_memory_temproot("/dev/shm", str(tmp_path / "no-meminfo")) is None
    st = os.statvfs(tmp_path)
    room = st.f_bavail * st.f_frsize >= conftest.SHM_FREE_FLOOR
    assert conftest.in_memory_temproot(str(tmp_path), str(rich)) == (
        str(tmp_path) if room else None
    )
    # this run: the folder pytest gave this test is under the root conftest.py chose
    chosen = os.environ.get("PYTEST_DEBUG_TEMPROOT")
    if chosen:
        assert tmp_path.resolve().is_relative_to(Path(chosen).resolve())


def test_test_processes_freeze_what_collection_left():
    """conftest.py freezes the objects alive after collection, so a run's closing
    gc.collect() walks only what tests made since (0.42 s a run before)."""
    import gc

    # without the freeze: 0; the whole suite's collection leaves about 600,000 objects,
    # a subset fewer (`scripts/test.sh --fast tests/core/project`: about 42,000)
    assert gc.get_freeze_count() > 10_000


def test_a_test_that_imported_much_is_followed_by_another_freeze():
    """After a test that imported 300 modules or more (the first training imports the
    whole stack), conftest.py freezes again; after one that imported less, not."""
    import gc
    import sys

    conftest = _root_conftest()
    conftest._FROZEN_AT[0] = len(sys.modules) - conftest.FREEZE_AFTER_MODULES + 1
    before = gc.get_freeze_count()
    alive = [[] for _ in range(1000)]  # tracked objects that outlive the test
    conftest.pytest_runtest_logfinish("a test", None)
    assert gc.get_freeze_count() == before  # 299 new modules: not worth a collection
    conftest._FROZEN_AT[0] -= 1
    conftest.pytest_runtest_logfinish("a test", None)
    assert gc.get_freeze_count() >= before + len(alive)
    assert conftest._FROZEN_AT[0] == len(sys.modules)
