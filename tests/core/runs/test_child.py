"""runs/child.py itself: what `call` brings back from its child, and what a timeout stops.

(tests/core/runs/test_isolate.py runs the lessons' trainers through it.) The functions called are
the package's and the stdlib's: the child imports a function by module and qualname, and
a function of a test module is not importable there (pytest puts tests/ on its own
sys.path, not the child's).
"""

import json
import re
import time
from pathlib import Path

import pytest

from qwen3_trn_helpers.errors import ConfigError, TrainingError
from qwen3_trn_helpers.model.variants import get_variant
from qwen3_trn_helpers.runs import child
from qwen3_trn_helpers.training.spec import RunSpec


def test_call_returns_the_value_and_raises_our_errors_as_they_are():
    spec = child.call(RunSpec, variant="nki_moe", steps=3, timeout=120)
    assert spec == RunSpec(variant="nki_moe", steps=3) and type(spec) is RunSpec
    with pytest.raises(ConfigError) as here:
        get_variant("warp")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(here.value))}$") as there:
        child.call(get_variant, "warp", timeout=120)
    assert type(there.value) is ConfigError  # our class, with its message


def test_call_names_the_function_of_any_other_error():
    with pytest.raises(TrainingError, match=r"json\.loads failed in its child process") as e:
        child.call(json.loads, "{", timeout=120)
    assert "JSONDecodeError" in str(e.value)  # the child's traceback comes with it


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie, dead but not reaped), None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_timeout_stops_the_whole_process_group(tmp_path):
    # a child that ignores SIGTERM and starts a grandchild (ignoring it too) that would
    # outlive it: only signalling the group, then SIGKILL after the grace, ends both
    script = "trap '' TERM; sleep 60 & echo $!; wait"
    result = child.run_child(["sh", "-c", script], log=tmp_path / "log", timeout=1, grace_s=0.5)
    grandchild = int(result.output.splitlines()[-1])
    deadline = time.monotonic() + 5  # the kernel delivers SIGKILL asynchronously
    while _state(grandchild) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(grandchild) in (None, "Z"), "the grandchild outlived the timeout"
    assert _state(result.pid) in (None, "Z")
    assert result.timed_out and result.returncode is None and not result.ok
    assert result.error_line() == f"no answer within {result.seconds:.0f} s"
    assert 1 <= result.seconds < 30  # stopped at the timeout, not after the sleep


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("flag", ["-m", "-c"])
def test_a_child_ends_when_its_parent_is_killed_outright(tmp_path, flag):
    """kill -9 runs no handler in the parent, so each Python child (``-m`` or ``-c``)
    watches its parent itself (runs/lifeline.py): a SIGKILLed smoke ladder had left its
    compile rung's ``train`` child running. Red before run_child watched every child."""
    import os
    import signal
    import subprocess
    import sys

    sleeper = (
        ["-m", "timeit", "-n", "1", "-r", "1", "import time; time.sleep(120)"]
        if flag == "-m"
        else ["-c", "import time; time.sleep(120)"]
    )
    parent_code = (
        "import sys; from qwen3_trn_helpers.runs.child import run_child\n"
        f"run_child([sys.executable, *{sleeper!r}], timeout=300,\n"
        "          while_running=lambda p: print(p.pid, flush=True))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    child_pid = int(parent.stdout.readline())
    time.sleep(1)  # the child's watch is started
    assert _state(child_pid) not in (None, "Z")
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while _state(child_pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _state(child_pid)
    if left not in (None, "Z"):
        os.kill(child_pid, signal.SIGKILL)
    assert left in (None, "Z"), f"the child {child_pid} outlived its killed parent"
