"""Repository-wide pytest setup: offline everywhere, a per-notebook time table, and each
test file's time and worker (``artifacts/test-times.json``, for sizing the suite).

Lives at the root so it covers both ``tests/`` and the nbval-collected ``notebooks/``
(nbval kernels inherit this process's environment).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

# No test and no notebook may touch the model hub.
os.environ["HF_HUB_OFFLINE"] = "1"
# Under pytest-xdist the workers share the cores: one compute thread each (and for the
# processes they start, notebook kernels included), or the thread pools oversubscribe
# the machine and spin against each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("MPLBACKEND", "Agg")

#: pytest's temporary folders (checkpoints, exported weights, run folders: about 16 GB
#: written and removed in a suite run, 2.1 GB at its peak) go to memory where it has room
#: for them: on a 2-core Zen 4 the checkpoint-heavy test files took 0.90x the wall time
#: (median of 3 pairs), each save written and each folder removed without the disk. The
#: floors leave the suite's own 8.4 GB peak and its temporary files room together; below
#: them (a laptop, a container's 64 MB /dev/shm) pytest keeps its usual folder.
#: PYTEST_DEBUG_TEMPROOT set by hand wins (``PYTEST_DEBUG_TEMPROOT=/tmp`` opts out).
SHM_FREE_FLOOR = 8 << 30
MEM_AVAILABLE_FLOOR = 16 << 30


def in_memory_temproot(shm: str = "/dev/shm", meminfo: str = "/proc/meminfo") -> str | None:
    """``shm`` when it is a writable folder with room for the suite's temporary files."""
    try:
        if not (os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK)):
            return None
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize < SHM_FREE_FLOOR:
            return None
        with open(meminfo) as f:
            kib = next(int(ln.split()[1]) for ln in f if ln.startswith("MemAvailable:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return shm if kib * 1024 >= MEM_AVAILABLE_FLOOR else None


if not os.environ.get("PYTEST_DEBUG_TEMPROOT"):
    _root = in_memory_temproot()
    if _root:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = _root

_NOTEBOOK_SECONDS: dict[str, float] = defaultdict(float)
_FILE_SECONDS: dict[str, float] = defaultdict(float)
_FILE_WORKER: dict[str, str] = {}
_STARTED = time.time()

#: each test file's seconds in a recent full run: the order in which xdist hands out
#: files (``--dist loadfile --no-loadscope-reorder``, scripts/test.sh) is longest first,
#: so no long file starts last while the other worker has run out of work
FILE_SECONDS = Path(__file__).parent / "tests" / "file-seconds.json"

#: a Unix time after which no further test starts (it is skipped, and says why). .ci/run
#: sets it for its steps after the README's test command, so a slower CPU than the one
#: the steps were sized on skips their tail, named in the summary, instead of the whole
#: run passing CI's 90 minutes. Unset (every other run, the README's command in CI
#: included): no effect.
START_BEFORE_ENV = "QWEN3_TRN_START_TESTS_BEFORE"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    deadline = os.environ.get(START_BEFORE_ENV)
    if deadline and time.time() > float(deadline):
        pytest.skip(f"not started: past this CI step's time budget ({START_BEFORE_ENV})")


def pytest_collection_modifyitems(items) -> None:
    """Files longest first (the greedy order that balances two workers best), each
    file's tests in their own order; a file the table lacks counts as the longest, so a
    new slow file never lands at the end. Without the table, pytest's order."""
    try:
        seconds = json.loads(FILE_SECONDS.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return
    longest = max(seconds.values(), default=0.0)
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::", 1)[0], i)

    def key(item) -> tuple[float, int]:
        path = item.nodeid.split("::", 1)[0]
        return (-seconds.get(path, longest + 1), first_seen[path])

    items.sort(key=key)  # stable: a file's tests (a notebook's cells) keep their order


def pytest_collection_finish(session) -> None:
    """Objects alive once the tests are collected are moved out of the garbage
    collector's sight (:func:`_freeze_what_stays`)."""
    _freeze_what_stays()


def pytest_runtest_logfinish(nodeid, location) -> None:
    """Again after a test that imported much (the first training imports the whole
    stack): what it imported stays for the process's life."""
    import sys

    if len(sys.modules) - _FROZEN_AT[0] >= FREEZE_AFTER_MODULES:
        _freeze_what_stays()


#: new modules since the last freeze that make it worth another (one gc.collect)
FREEZE_AFTER_MODULES = 300
_FROZEN_AT = [0]  # len(sys.modules) at the last freeze


def _freeze_what_stays() -> None:
    """Move the objects alive now (torch, torchtitan, transformers: about 600,000) out of
    the garbage collector's sight, after one last collection.

    Each in-process run ends in ``release_freed_memory``'s ``gc.collect()`` (so glibc
    can return the run's memory), and CPython starts full collections of its own as
    objects pile up; each walked all of them: 0.42 s a run, against 0.00001 s once
    frozen (2-core Zen 4). Three training files in one process spent 17.1 s in the
    collector, 4.5 s with a freeze after each test that imported 300 modules or more.
    What tests create afterwards is collected as before. Test processes only: the
    package never freezes a user's kernel.
    """
    import gc
    import sys

    gc.collect()
    gc.freeze()
    _FROZEN_AT[0] = len(sys.modules)


def pytest_runtest_logreport(report) -> None:
    path = report.nodeid.split("::", 1)[0]
    # (under xdist the controller receives every report, each naming its worker)
    _FILE_SECONDS[path] += report.duration
    _FILE_WORKER[path] = getattr(getattr(report, "node", None), "workerinput", {}).get(
        "workerid", "main"
    )
    if path.endswith(".ipynb"):
        _NOTEBOOK_SECONDS[path] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    # (an xdist worker saw only its own files: the controller, which saw all, writes)
    if not _FILE_SECONDS or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    artifacts = Path(os.environ.get("QWEN3_TRN_ARTIFACTS", "artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    # every file's setup + call + teardown seconds and the worker that ran it, slowest
    # first; with the wall time, how evenly the workers were loaded
    files = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])
    (artifacts / "test-times.json").write_text(
        json.dumps(
            {
                "wall_s": round(time.time() - _STARTED, 1),
                "files": [
                    {"path": p, "s": round(s, 2), "worker": _FILE_WORKER.get(p)} for p, s in files
                ],
            },
            indent=1,
        )
    )
    if not _NOTEBOOK_SECONDS:
        return
    terminalreporter.section("notebook run times (nbval, all cells)")
    for path, seconds in sorted(_NOTEBOOK_SECONDS.items()):
        terminalreporter.write_line(f"{seconds:7.1f} s  {path}")
    (artifacts / "notebook-times.json").write_text(
        json.dumps({p: round(s, 1) for p, s in sorted(_NOTEBOOK_SECONDS.items())}, indent=2)
    )
