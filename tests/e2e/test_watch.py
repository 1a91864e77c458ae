"""A job you can watch, with a rank that sleeps (issue 46, item 5).

The sleeping rank is made by tests/e2e/slow_rank/sitecustomize.py (given through
PYTHONPATH): in the rank whose RANK it names, torchtitan's ``train_step`` sleeps before
each step from a given step on. A few seconds: a straggler, which the log line and
``qwen3-trn watch`` name. An hour: a hung job, which the watchdog stops after
--hang-timeout with every rank's stack saved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.training.metrics_file import read_metrics
from qwen3_trn_helpers.training.ranks import free_port

SLOW_RANK = Path(__file__).parent / "slow_rank"


def _env(rank: int, sleep_s: float, from_step: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SLOW_RANK),
            "QWEN3_TRN_TEST_SLOW_RANK": str(rank), "QWEN3_TRN_TEST_SLOW_S": str(sleep_s),
            "QWEN3_TRN_TEST_SLOW_FROM": str(from_step)}  # fmt: skip


def _train(*args: str) -> list[str]:
    return [sys.executable, "-m", "qwen3_trn_helpers", "train", "--no-progress", *args]


@pytest.mark.slow
@pytest.mark.long
def test_a_slowed_rank_is_named_a_straggler_in_the_log_and_by_watch(tmp_path, capsys):
    """Two nodes (agents on this machine), one rank each; rank 1 sleeps 5 s before
    each step from step 2 (a step here takes 1-5 s, by the machine's load): both ranks'
    steps take as long (rank 0 waits), and node 1 is named, by its own time, in the log
    every 2 steps and on the watch screen."""
    out = tmp_path / "run"
    port = free_port()
    cmd = _train("--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", f"127.0.0.1:{port}",
                 "--steps", "8", "--watch-every", "2", "--out", str(out))  # fmt: skip
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=_env(1, 5.0, 2)) for _ in range(2)]  # fmt: skip
    screen = None
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and any(a.poll() is None for a in agents):
        steps = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
        if screen is None and len(steps) >= 6:  # the run is going: watch it
            assert main(["watch", str(out)]) == 0
            screen = capsys.readouterr().out
        time.sleep(1)
    outputs = [a.communicate(timeout=60)[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outputs
    (tmp_path / "watch-screen.txt").write_text(screen or "")
    assert screen is not None
    rows = {line.split()[0]: line for line in screen.splitlines()[1:3]}
    assert rows["0"].endswith(" ok") and rows["1"].endswith(" STRAGGLER"), screen
    assert "node 1 (" in screen and ") is a straggler:" in screen
    logs = "".join(p.read_text() for p in out.glob("launch-*.log"))
    lines = [ln for ln in logs.splitlines() if ln.startswith("watch: nodes at step ")]
    assert [ln.split()[4] for ln in lines] == ["2", "4", "6", "8"], logs
    assert all(") is a straggler:" in ln for ln in lines[1:]), lines


@pytest.mark.slow
@pytest.mark.long
def test_a_hung_rank_is_stopped_with_every_ranks_stack(tmp_path):
    """Rank 1 of 2 sleeps an hour before step 3: after --hang-timeout every rank's
    stack is saved, the job ends in under a minute more, and the one line says where
    each rank was (rank 1 in the sleep, rank 0 waiting in a collective)."""
    out = tmp_path / "run"
    started = time.monotonic()
    proc = subprocess.run(
        _train("--nproc", "2", "--steps", "20", "--hang-timeout", "15", "--out", str(out)),
        capture_output=True, text=True, timeout=400, env=_env(1, 3600, 3),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the watchdog stopped the run: step 3 ran over 15 s "
                           "(--hang-timeout); rank 1 (node 0, "), last  # fmt: skip
    assert "at sitecustomize.py:" in last and "in train_step_after_a_sleep; rank 0 (node 0" in last
    assert "Traceback" not in proc.stderr
    for rank in (0, 1):
        dump = (out / "ranks" / f"stack-0000{rank}.txt").read_text()
        assert "Timeout (0:00:15)!" in dump
    assert "train_step_after_a_sleep" in (out / "ranks" / "stack-00001.txt").read_text()
    record = json.loads((out / "ranks" / "watchdog.json").read_text())
    assert record["step"] == 3 and record["no_stack"] == []
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and info["error"] == last.removeprefix("error: ")
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert time.monotonic() - started < 300
