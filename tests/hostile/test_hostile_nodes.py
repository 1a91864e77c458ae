"""Several nodes that disagree: other settings or another --nnodes stop every node
naming the setting, an endpoint answered by another service ends in one line, and
torchrun is watched while the nodes still meet."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hostile import _processes_naming, one_error_line

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.training.metrics_file import read_metrics
from qwen3_trn_helpers.training.spec import RunSpec

# --- one settings check across nodes ---------------------------------------------------

_RANK_CHECK = """
import os, sys, json
import torch.distributed as dist
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.training.ranks import check_same_versions
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=30))
try:
    check_same_versions(json.loads(sys.argv[1]))
    print("agreed")
except ConfigError as e:
    print(f"error: {e}")
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.long
def test_nodes_started_with_other_settings_stop_naming_the_setting(tmp_path):
    """Node B with --seq-len 64 against node A's default trained silently (tokens_seen
    disagreed with run.json). The check the ranks already make for library versions now
    compares each node's resolved settings too: every rank stops with the same line."""
    from qwen3_trn_helpers.training.ranks import free_port

    port = free_port()
    a = {"variant": "native", "seq len": 256, "--out": "/shared/run"}
    b = {**a, "seq len": 64}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK_CHECK, json.dumps(settings)],
            env={
                **os.environ,
                "RANK": str(r),
                "WORLD_SIZE": "2",
                "GROUP_RANK": str(r),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for r, settings in enumerate((a, b))
    ]
    outputs = [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in procs]
    assert outputs[0] == outputs[1], outputs  # every rank says the same
    assert "different run settings: seq len is 64 on node 1" in outputs[0]
    assert "and 256 on node 0" in outputs[0]


def test_the_settings_compared_name_each_flag(tmp_path):
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.ranks import settings_mismatch
    from qwen3_trn_helpers.training.trainer import same_on_every_node

    def report(node, **changes):
        spec = RunSpec(out=str(tmp_path), **changes)
        return {"node": node, "host": "h", "settings": same_on_every_node(plan_run(spec))}

    assert settings_mismatch([report(0), report(1)]) is None
    assert settings_mismatch([report(0), report(1, skip_memory_check=True)]) is None
    line = settings_mismatch([report(0), report(1, variant="transformers_v5")])
    assert "variant is 'transformers_v5' on node 1 (h) and 'native' on node 0" in line
    other_out = {"node": 1, "host": "h", "settings": {**report(1)["settings"], "--out": "/b"}}
    assert "--out is '/b' on node 1" in settings_mismatch([report(0), other_out])


# --- an endpoint answered by another service -------------------------------------------


@pytest.mark.slow
@pytest.mark.long
def test_an_endpoint_answered_by_another_service_ends_in_one_line(tmp_path, capsys):
    """An HTTP server on the rendezvous port: the launch hung over 150 s after torchrun
    had failed (our own count of joined nodes blocked on the HTTP server) and left
    torchrun behind. Now it ends when torchrun does, in one line, with nothing left."""
    import http.server
    import threading
    import time

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # its own log is not the launch's terminal
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    out = tmp_path / "never"
    started = time.monotonic()
    try:
        code = main(["train", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
                     "--rdzv-timeout", "15", "--out", str(out), "--no-progress"])  # fmt: skip
    finally:
        server.shutdown()
    took = time.monotonic() - started
    assert code == 1
    line = one_error_line(capsys)
    assert f"something that is not torchrun's rendezvous answers at 127.0.0.1:{port}" in line
    # the timeout, the start-up margin (15 s), the stop; generous: 2 cores, shared
    assert took < 15 + 15 + 60, took
    assert not _processes_naming(str(out))
    print(f"ended {took:.1f} s after the start")


def test_torchrun_is_watched_while_the_nodes_still_meet(tmp_path):
    """Before its ranks exist nothing else would stop torchrun when the launcher is
    killed (it waited out --rdzv-timeout, 600 s by default): it runs under a watch of
    its parent. Here the watched module is http.server and its parent a shell."""
    import time

    marker = str(tmp_path / "watched")
    shell = subprocess.Popen(
        ["bash", "-c", f'"{sys.executable}" -m qwen3_trn_helpers.runs.lifeline http.server '
         f'0 --bind 127.0.0.1 --directory "{marker}" & wait'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _processes_naming(marker):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1)
        shell.kill()  # kill -9 of the launcher
        shell.wait()
        killed = time.monotonic()
        while _processes_naming(marker):
            assert time.monotonic() - killed < 15, "the watched module outlived its parent"
            time.sleep(0.2)
    finally:
        for pid in _processes_naming(marker):
            os.kill(pid, 9)


# --- nodes started with another --nnodes -----------------------------------------------


def test_launch_settings_are_compared_as_data(tmp_path):
    """Each node's launch settings, as the watch reads them back from torchrun's store:
    the first difference, with both values and the other node's host, in one line that
    shows nothing another node wrote as terminal control characters."""
    from qwen3_trn_helpers.runs.rendezvous import everyone_read, launch_mismatch

    def entry(index, seen, host="a", **settings):
        given = {"--nnodes": 2, "--nproc": 1, **settings}
        return {"index": index, "seen": seen, "host": host, "pid": 7, "settings": given}

    same = [entry(1, 2), entry(2, 1, host="b")]
    assert launch_mismatch(1, same) is None and launch_mismatch(2, same) is None
    other = [entry(1, 2), entry(2, 2, host="evil\x1b[2J\nhost", **{"--nnodes": "3\n$(x)"})]
    line = launch_mismatch(1, other)
    assert line.startswith("--nnodes differs between nodes: 2 here (a), ")
    assert "on evil?[2J?host (launch pid 7)" in line and "\n" not in line and "\x1b" not in line
    assert launch_mismatch(2, other).startswith("--nnodes differs between nodes: 3?$(x) here")
    assert everyone_read(1, other) and not everyone_read(1, [entry(1, 2), entry(2, 1)])


def test_every_torchrun_setting_is_compared_between_nodes():
    """What each node publishes is every setting torchrun takes that the ranks cannot
    compare: a node started with another --max-restarts gives up while the others wait
    for a round it never joins; that, too, stops every node with one line."""
    from qwen3_trn_helpers.runs.rendezvous import launch_mismatch
    from qwen3_trn_helpers.runs.torchrun import launch_settings
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec

    def settings(**fields):
        spec = RunSpec(nnodes=2, rdzv_endpoint="10.0.0.1:29400", out="runs/x",
                       resume="auto", checkpoint_interval=5, **fields)  # fmt: skip
        return launch_settings(plan_run(spec, device_type="cpu"))

    mine = settings(max_restarts=3)
    assert set(mine) == {"--nnodes", "--nproc", "--max-restarts", "--rdzv-timeout"}
    entries = [
        {"index": 1, "seen": 2, "host": "a", "pid": 1, "settings": mine},
        {"index": 2, "seen": 2, "host": "b", "pid": 2, "settings": settings(max_restarts=0)},
    ]
    assert launch_mismatch(1, entries).startswith("--max-restarts differs between nodes: 3 here")
    entries[1]["settings"] = settings(max_restarts=3, rdzv_timeout=60)
    assert launch_mismatch(2, entries).startswith("--rdzv-timeout differs between nodes: 60 here")


def test_launch_settings_go_through_a_real_store():
    """Against a TCPStore as torchrun hosts it: each node gets its own number, reads
    every entry, and records how many it has read."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from qwen3_trn_helpers.runs.rendezvous import publish_launch, read_launches
    from qwen3_trn_helpers.training.ranks import free_port

    port = free_port()
    host = TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=5))
    endpoint = f"127.0.0.1:{port}"
    first = publish_launch(endpoint, '{"host": "a", "pid": 1, "settings": {"--nnodes": 3}}')
    second = publish_launch(endpoint, '{"host": "b", "pid": 2, "settings": {"--nnodes": 2}}')
    assert (first, second) == (1, 2)
    host.set("qwen3-trn.launch.3", "not an entry")  # something else wrote a key: skipped
    host.add("qwen3-trn.launch.count", 1)
    entries = read_launches(endpoint, first)
    assert [(e["index"], e["host"], e["seen"]) for e in entries] == [(1, "a", 3), (2, "b", 0)]
    assert read_launches(f"127.0.0.1:{free_port()}", 1) is None  # no store: nothing read
    del host


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("other", [2, 4], ids=["forms-a-group-of-2", "never-forms"])
def test_nodes_started_with_another_nnodes_all_stop_naming_it(tmp_path, other):
    """`--nnodes 3` on one node against `--nnodes 2` on another: torchrun formed a group
    of 2 and both trained as 2 nodes, silently (or, against --nnodes 4, both waited out
    --rdzv-timeout and blamed a missing node). Now each node's launch publishes its
    settings in torchrun's store and every node stops within a minute, naming the flag
    and both values, with nothing left running."""
    import socket
    import time

    from qwen3_trn_helpers.training.ranks import free_port

    out = tmp_path / "run"
    port = free_port()
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "qwen3_trn_helpers",
                "train",
                "--no-progress",
                "--nnodes",
                str(nnodes),
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--rdzv-timeout",
                "120",
                "--steps",
                "20",
                "--out",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for nnodes in (3, other)
    ]
    try:  # from the moment torchrun's store listens (torch's start alone takes a minute
        # on 2 shared cores): before, both waited out --rdzv-timeout or trained
        listening = None
        deadline = time.monotonic() + 300
        while any(agent.poll() is None for agent in agents) and time.monotonic() < deadline:
            if listening is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    listening = time.monotonic()
                except OSError:
                    pass
            time.sleep(0.5)
        took = time.monotonic() - (listening or deadline)
        errors = [agent.communicate(timeout=10)[1] for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
    assert [agent.returncode for agent in agents] == [1, 1], errors
    lines = [err.strip().splitlines()[-1] for err in errors]
    assert lines[0].startswith("error: --nnodes differs between nodes: 3 here "), lines
    assert f", {other} on " in lines[0], lines
    assert lines[1].startswith(f"error: --nnodes differs between nodes: {other} here "), lines
    assert ", 3 on " in lines[1], lines
    assert not any("Traceback" in err for err in errors)
    assert took < 60, took
    assert not _processes_naming(str(out))
    assert not (out / "metrics.jsonl").exists() or not read_metrics(out / "metrics.jsonl")
    print(f"both nodes stopped {took:.1f} s after torchrun's store listened")


def test_the_rendezvous_state_torch_writes_is_read():
    """torch 2.14's rendezvous state holds timezone-aware deadlines: the restricted
    unpickler refused datetime.timezone, so the count of joined nodes was never read
    (the launch said "nothing answered" with a node waiting there)."""
    import io
    import pickle
    from datetime import UTC, datetime

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    from qwen3_trn_helpers.runs.rendezvous import _RendezvousStateOnly

    state = dr._RendezvousState()
    for n in range(2):
        node = dr._NodeDesc(f"node{n}", 100 + n, 0)
        state.participants[node] = n
        state.last_heartbeats[node] = datetime.now(UTC)
    state.deadline = datetime.now(UTC)
    read = _RendezvousStateOnly(io.BytesIO(pickle.dumps(state))).load()
    assert len(read.participants) == 2
    with pytest.raises(pickle.UnpicklingError, match="system is not part of a rendezvous state"):
        _RendezvousStateOnly(io.BytesIO(pickle.dumps(__import__("os").system))).load()
