"""A job seen from its ranks' files (issue 46, item 5): a straggler named by its own
time, not the step time every rank shares; a silent node; an earlier attempt's files
left out; the watchdog's stack files read into one record. Files written by hand, so
each check takes milliseconds; the runs themselves: tests/e2e/test_watch.py."""

from __future__ import annotations

import json
import os
import time

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.training import node_status
from qwen3_trn_helpers.training.heartbeat import RankWatch
from qwen3_trn_helpers.training.watchdog import RECORD, Watchdog, watchdog_stop

NOW = 1_800_000_000.0


def _write(out, rank, *, node, steps, beat=NOW, started=NOW - 100, world=4, **extra):
    path = node_status.rank_file(out, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"rank": rank, "world": world, "node": node, "host": f"host-{node}",
             "started": started, "beat": beat, "step": steps[-1][0] if steps else 0,
             "in_step": None, "since": None, "steps": steps, **extra}  # fmt: skip
    path.write_text(json.dumps(state))


def _job(out, late_node: int | None, late_s: float = 1.5, beat_of=None):
    """4 ranks on 2 nodes, 6 steps of 3 s: ranks of ``late_node`` have their batch
    ``late_s`` later than the others, who wait for them (every step time is the same)."""
    for rank in range(4):
        node = rank // 2
        late = late_s if node == late_node else 0.0
        steps = [[k, 3.0, NOW - 100 + 3 * k + late] for k in range(1, 7)]
        _write(out, rank, node=node, steps=steps, beat=(beat_of or {}).get(node, NOW))


def test_a_node_the_others_wait_for_is_the_straggler(tmp_path):
    _job(tmp_path, late_node=1)
    found = node_status.nodes(node_status.read_ranks(tmp_path), now=NOW)
    assert [(n.index, n.ranks) for n in found] == [(0, [0, 1]), (1, [2, 3])]
    assert [n.step_s for n in found] == [3.0, 3.0]  # the same for every rank
    assert [n.own_s for n in found] == [1.5, 3.0]  # node 0 waited 1.5 s each step
    assert [n.straggler for n in found] == [False, True]
    said = node_status.verdict(found)
    assert said == ("node 1 (host-1) is a straggler: 3.00 s of its own a step, the "
                    "others' median 1.50 s (over 1.5x)")  # fmt: skip
    line = node_status.line(found, 6)
    assert line.startswith("nodes at step 6 (step s/own s): node 0 3.00/1.50, node 1 3.00/3.00;")


def test_no_straggler_within_the_factor_and_none_when_even(tmp_path):
    _job(tmp_path, late_node=1, late_s=0.5)  # own 2.5 s against 3.0 s: within 1.5x
    found = node_status.nodes(node_status.read_ranks(tmp_path), now=NOW)
    assert not any(n.straggler for n in found)
    assert node_status.verdict(found) == "no straggler, no silent node"
    assert any(n.straggler for n in node_status.nodes(node_status.read_ranks(tmp_path),
                                                        now=NOW, factor=1.1))  # fmt: skip


def test_a_node_that_stopped_beating_is_silent(tmp_path):
    _job(tmp_path, late_node=None, beat_of={1: NOW - 300})
    found = node_status.nodes(node_status.read_ranks(tmp_path), now=NOW)
    assert [n.silent for n in found] == [False, True]
    assert "node 1 (host-1) is silent: no heartbeat for 300 s" in node_status.verdict(found)
    # every node quiet (the run ended): none is singled out
    quiet = node_status.nodes(node_status.read_ranks(tmp_path), now=NOW + 1000)
    assert not any(n.silent for n in quiet)


def test_an_earlier_attempts_files_are_left_out(tmp_path):
    _job(tmp_path, late_node=None)
    # a requeue on one node fewer: 2 ranks, much later; rank 2 and 3's files are old
    for rank in range(2):
        _write(tmp_path, rank, node=0, world=2, started=NOW + 5000, beat=NOW + 5100,
               steps=[[7, 3.0, NOW + 5050]])  # fmt: skip
    ranks = node_status.read_ranks(tmp_path)
    assert sorted(r["rank"] for r in ranks) == [0, 1] and {r["world"] for r in ranks} == {2}


def test_the_watch_command_prints_the_screen(tmp_path, capsys, monkeypatch):
    _job(tmp_path, late_node=1)
    monkeypatch.setattr(time, "time", lambda: NOW + 2)
    assert main(["watch", str(tmp_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].split() == ["node", "host", "ranks", "step", "step", "s", "own", "s",
                                "in", "step", "s", "beat", "s", "state"]  # fmt: skip
    assert shown[1].split()[-1] == "ok" and shown[2].split()[-1] == "STRAGGLER"
    assert shown[3].startswith("4 of 4 ranks reporting; node 1 (host-1) is a straggler")
    assert main(["watch", str(tmp_path / "nothing")]) == 1
    assert "is not a run folder" in capsys.readouterr().err


def test_a_rank_file_stays_whole_and_the_header_of_no_dump_goes(tmp_path):
    watch = RankWatch(tmp_path, rank=0, world=1, node=0, hang_s=30)
    try:
        with watch.step(1, watched=False):
            pass
        with watch.step(2, watched=True):  # armed, then disarmed at the step's end
            assert "a training step over 30 s" in watch.watchdog.path.read_text()
    finally:
        watch.close()
    state = json.loads(node_status.rank_file(tmp_path, 0).read_text())
    assert state["step"] == 2 and [s[0] for s in state["steps"]] == [1, 2]
    assert not watch.watchdog.path.exists()  # nothing was dumped: the file went
    assert [p.name for p in (tmp_path / "ranks").iterdir()] == ["rank-00000.json"]


DUMP = """# rank {rank}, node 0 (vm), pid 1, 2026-12-05: a training step over 15 s ...
Timeout (0:00:15)!
Thread 0x00007f9b96e856c0 (most recent call first):
  File "/x/threading.py", line 331 in wait
  File "/x/threading.py", line 1002 in _bootstrap

Thread 0x00007f9c7b20ab80 (most recent call first):
  File "{inner}", line {line} in {func}
  File "/v/site-packages/torchtitan/trainer.py", line 1039 in train
  File "<frozen runpy>", line 198 in _run_module_as_main
"""


def test_the_watchdog_record_names_where_each_rank_was(tmp_path):
    _job(tmp_path, late_node=None)
    ranks = tmp_path / "ranks"
    (ranks / "stack-00000.txt").write_text(DUMP.format(
        rank=0, inner=f"/v/site-packages{os.sep}torch{os.sep}_ops.py", line=1350, func="__call__"
    ))  # fmt: skip
    (ranks / "stack-00002.txt").write_text(DUMP.format(
        rank=2, inner="/t/slow.py", line=26, func="sleepy"
    ))  # fmt: skip
    for name in ("stack-00000.txt", "stack-00002.txt"):  # dumped after this launch began
        os.utime(ranks / name, (NOW, NOW))
    # an earlier attempt's dump, before this launch: not this stop's
    (ranks / "stack-00001.txt").write_text(DUMP.format(rank=1, inner="/a.py", line=1, func="f"))
    os.utime(ranks / "stack-00001.txt", (NOW - 10_000, NOW - 10_000))
    said = watchdog_stop(tmp_path, since=NOW - 5_000)
    assert said.startswith(
        "the watchdog stopped the run: a step ran over 0 s (--hang-timeout); rank 2 (node 1, "
        "host-1) at slow.py:26 in sleepy; rank 0 (node 0, host-0) at _ops.py:1350 in "
        "__call__, from trainer.py:1039 in train; ranks 1 (node 0, host-0), 3 (node 1, "
        "host-1) left no stack"
    )
    record = json.loads((ranks / RECORD).read_text())
    assert sorted(record["stacks"]) == ["0", "2"] and record["no_stack"] == [1, 3]
    assert watchdog_stop(tmp_path, since=NOW + 60) is None  # nothing since then


def test_a_watchdog_that_fires_dumps_and_ends_the_process(tmp_path):
    """For real, in a child process: a step that sleeps past 1 s is dumped, then ended
    by SIGALRM; the stack names the sleeping function."""
    import subprocess
    import sys

    code = (
        "import time; from pathlib import Path\n"
        "from qwen3_trn_helpers.training.watchdog import Watchdog\n"
        f"w = Watchdog(Path({str(tmp_path)!r}), rank=3, node=1, hang_s=1)\n"
        "(Path({0!r}) / 'ranks').mkdir()\n".format(str(tmp_path))
        + "w.arm(5)\n"
        "def stuck_in_a_step(): time.sleep(60)\n"
        "stuck_in_a_step()\n"
    )
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == -14  # SIGALRM
    assert time.monotonic() - started < 30
    dump = (tmp_path / "ranks" / "stack-00003.txt").read_text()
    assert "Timeout (0:00:01)!" in dump and "in stuck_in_a_step" in dump


def test_no_watchdog_when_off(tmp_path):
    dog = Watchdog(tmp_path, rank=0, node=0, hang_s=0)
    dog.arm(2)
    dog.close()
    assert not dog.path.exists()
