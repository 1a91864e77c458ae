"""Launch faults (issue 32): a store port another job takes, a stop during the first
compiled step, compile-cache faults, the node a killed rank ran on, and a fabric check
that must never fail at its own teardown."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers.runs.torchrun import clashed_port, port_clash_message
from qwen3_trn_helpers.training.ranks import free_port
from qwen3_trn_helpers.training.spec import RunSpec

#: torch 2.14's libuv TCPStore, when its port is taken (the line a rank printed in the
#: probe that found the race)
LIBUV_CLASH = (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
    "local network address. port: 41873, useIpv6: false, code: -98, name: EADDRINUSE, "
    "message: address already in use"
)


def train_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "qwen3_trn_helpers", "train", "--no-progress", *args]


# --- a port another job takes -----------------------------------------------------


def test_a_taken_store_port_is_recognised():
    assert clashed_port(f"[rank0]: {LIBUV_CLASH}") == 41873
    legacy = "failed to bind to [::]:29511 (errno: 98 - Address already in use)."
    assert clashed_port(legacy) == 29511
    assert clashed_port("DistNetworkError: Connection reset by peer") is None


def test_a_taken_port_the_user_chose_is_named_with_the_fix():
    spec = RunSpec(nnodes=2, nproc=1, rdzv_endpoint="10.0.0.5:29500", out="x")
    said = port_clash_message(spec, 29500, multinode=True)
    assert said.startswith("port 29500 of --rdzv-endpoint 10.0.0.5:29500 is in use")
    assert "pick a free port" in said and "\n" not in said
    said = port_clash_message(spec, 41873, multinode=True)  # torchrun's pick, node 0
    assert said.startswith("port 41873, which torchrun picked") and "--max-restarts 1" in said


#: run in every process of the launch (PYTHONPATH): torchrun's first pick of rank 0's
#: store port is the port "another job" holds, as when that job took it between
#: torchrun's probe and the rank's bind; later picks are torchrun's own
CLASH_ONCE = """
import os, sys
marker = os.environ.get("QWEN3_TRN_TEST_CLASH")
if marker and "torch.distributed.run" in sys.orig_argv:
    import torch.distributed.elastic.rendezvous.api as api
    original = api.get_free_port
    def taken_once():
        try:
            port = int(open(marker).read())
            os.unlink(marker)
            return port
        except FileNotFoundError:
            return original()
    api.get_free_port = taken_once
"""


@pytest.mark.slow
@pytest.mark.long
def test_a_store_port_taken_by_another_job_launches_again(tmp_path):
    """Two ranks on one node; the port torchrun picked for rank 0's store is held by
    another process: the launch starts again on another port and trains every step
    (it ended `error: unexpected DistNetworkError ... EADDRINUSE`, failed at 0 steps)."""
    other_job = socket.socket()
    other_job.bind(("", 0))  # every address, as the store binds
    other_job.listen()
    port = other_job.getsockname()[1]
    marker = tmp_path / "clash"
    marker.write_text(str(port))
    shutdowns = tmp_path / "shutdowns"
    shutdowns.mkdir()
    # (and whether a training rank reaches interpreter shutdown with gloo threads: item 11)
    env = _hooked_env(tmp_path, CLASH_ONCE + AT_SHUTDOWN, QWEN3_TRN_TEST_CLASH=str(marker),
                      SHUTDOWN_DIR=str(shutdowns))  # fmt: skip
    out = tmp_path / "run"
    try:
        proc = subprocess.run(
            train_cmd("--nproc", "2", "--steps", "2", "--out", str(out)),
            capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
    finally:
        other_job.close()
    assert not marker.exists()  # torchrun did pick the taken port
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"note: port {port}, which torchrun picked for the ranks' store, was taken" in (
        proc.stderr
    )
    assert "unexpected" not in proc.stderr
    info = json.loads((out / "run.json").read_text())
    assert (info["status"], info["steps_completed"]) == ("completed", 2)
    assert "EADDRINUSE" in (out / "launch.1.log").read_text()  # the first launch's log kept
    assert _shutdowns_with_threads(shutdowns) == {}


# --- a stop while the ranks are inside a long step ------------------------------------

#: makes every rank's first training step take minutes, as the first compiled step does on
#: trn2 (an empty inductor cache, a loaded machine): the rank touches ``step.RANK`` in
#: SLOW_STEP_DIR as the step begins, then sleeps in it; a SIGTERM meanwhile is deferred
#: to the step's end (training/stopping.py), which torchrun's 30 s grace never reaches.
#: Loaded by the ranks as sitecustomize.
#: step 2 sleeps 300 s: a rank that trained a step saves on SIGTERM at its step's end, which
#: comes after torchrun's grace (before any step has trained, a rank stops at once, issue 51)
SLOW_SECOND_STEP = """
import os
if os.environ.get("SLOW_STEP_DIR") and "RANK" in os.environ:
    import time
    from pathlib import Path
    from torchtitan.trainer import Trainer

    real = Trainer.train_step
    def slow(self, *args, **kwargs):
        if self.step == 2:
            (Path(os.environ["SLOW_STEP_DIR"]) / f"step.{os.environ['RANK']}").touch()
            time.sleep(300)
        return real(self, *args, **kwargs)
    Trainer.train_step = slow
"""


def _processes_naming(text: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split() if int(pid) != os.getpid()]


@pytest.mark.slow
@pytest.mark.long
def test_sigterm_in_a_step_longer_than_torchruns_grace_ends_terminated(tmp_path):
    """SIGTERM to `train --nproc 2 --checkpoint-interval 2` while both ranks are in a step
    that outlasts torchrun's 30 s grace (step 2: a rank that has trained waits for its
    step's end to save): torchrun kills the ranks before they record the stop. run.json
    had said `running` for good; now the launch records `terminated`, says what the
    folder holds, and why the save did not happen."""
    import signal
    import time

    hooks, inside = tmp_path / "hooks", tmp_path / "inside"
    hooks.mkdir()
    inside.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_SECOND_STEP)
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    out = tmp_path / "run"
    cli = subprocess.Popen(
        train_cmd("--nproc", "2", "--steps", "10", "--checkpoint-interval", "2",
                  "--out", str(out)),
        env={**os.environ, "PYTHONPATH": path, "SLOW_STEP_DIR": str(inside),
             "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        while len(list(inside.glob("step.*"))) < 2:  # both ranks inside step 2
            assert cli.poll() is None and time.monotonic() < deadline, cli.stderr.read()
            time.sleep(0.2)
        cli.send_signal(signal.SIGTERM)  # scancel, an eviction
        _, stderr = cli.communicate(timeout=200)
    finally:
        for pid in _processes_naming(str(out)):
            os.kill(pid, signal.SIGKILL)
    assert cli.returncode == 143, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "terminated: step 1 is in metrics.jsonl", stderr[
        -3000:
    ]
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").open()] == [1]
    info = json.loads((out / "run.json").read_text())
    assert (info["status"], info["steps_completed"]) == ("terminated", 1), info
    assert "torchrun's 30 s grace ran out" in info["stopped"]
    assert not _processes_naming(str(out))


# --- a fabric check that passed never fails at its own teardown ---------------------

#: loaded by every rank as sitecustomize: at interpreter shutdown (if the process gets
#: there) it records the gloo threads still running, the ones whose destruction there
#: aborted a rank that had passed ("terminate called without an active exception")
AT_SHUTDOWN = """
import os
if os.environ.get("SHUTDOWN_DIR") and "RANK" in os.environ:
    import atexit
    from pathlib import Path

    def record():
        from qwen3_trn_helpers.training.ranks import collective_threads
        name = f"{os.environ.get('GROUP_RANK', '0')}-{os.environ['RANK']}-{os.getpid()}"
        (Path(os.environ["SHUTDOWN_DIR"]) / name).write_text(repr(collective_threads()))
    atexit.register(record)
"""


def _hooked_env(tmp_path: Path, hook: str, **extra: str) -> dict[str, str]:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(hook)
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def _shutdowns_with_threads(folder: Path) -> dict[str, str]:
    """Each rank that reached interpreter shutdown with gloo threads running: theirs."""
    return {f.name: f.read_text() for f in folder.iterdir() if f.read_text() != "[]"}


@pytest.mark.slow
@pytest.mark.long
def test_the_fabric_check_passes_10_times_in_a_row_on_two_agents(tmp_path):
    """The collectives rung across two torchrun agents (the printed sbatch script's
    first srun, one rank per node), 10 times in a row: every node passes, every time,
    and no rank reaches interpreter shutdown with its process group's threads running
    (they did, every time: two ``pt_gloo_runloop`` and ``gloo_tcp_loop`` outlived
    destroy_process_group, and on a real two-node Slurm a rank aborted there, exit -6).
    It was 20 (511 s of the long step on 2 cores); the fault it guards showed every time."""
    from qwen3_trn_helpers.ops.smoke.ladder import _command, _rungs

    rung = next(r for r in _rungs(full_size=False) if r.name == "collectives")
    shutdowns = tmp_path / "shutdowns"
    shutdowns.mkdir()
    env = _hooked_env(tmp_path, AT_SHUTDOWN, SHUTDOWN_DIR=str(shutdowns))
    passed, problems = 0, []
    for attempt in range(10):
        across = RunSpec(nnodes=2, nproc=1, rdzv_endpoint=f"127.0.0.1:{free_port()}",
                         rdzv_timeout=120, out="x")  # fmt: skip
        cmd = _command(rung, tmp_path, across)
        agents = [
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )  # fmt: skip
            for _ in range(2)
        ]
        outputs = [agent.communicate(timeout=300)[0] for agent in agents]
        codes = [agent.returncode for agent in agents]
        said = sorted(ln for out in outputs for ln in out.splitlines() if ln.startswith("ok: "))
        if codes == [0, 0] and len(said) == 2 and not any("terminate" in o for o in outputs):
            passed += 1
        else:
            problems.append((attempt, codes, [o[-1500:] for o in outputs]))
    assert (passed, problems) == (10, []), problems[:2]
    assert _shutdowns_with_threads(shutdowns) == {}


# --- compile-cache faults: one line naming the folder and the fix ----------------------


def _compiled_train(tmp_path: Path, monkeypatch, cache: Path, capsys) -> tuple[int, str]:
    from qwen3_trn_helpers.cli import main

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    argv = ["train", "--steps", "1", "--compile", "--no-progress", "--out", str(tmp_path / "r")]
    code = main(argv)
    return code, capsys.readouterr().err


def test_a_compile_cache_that_is_a_file_is_refused_before_compiling(tmp_path, monkeypatch, capsys):
    """The cache folder replaced by a file ended, deep in the first compiled step, in
    `error: unexpected FileExistsError`; now one line before anything compiles."""
    cache = tmp_path / "inductor"
    cache.write_text("not a folder")
    code, err = _compiled_train(tmp_path, monkeypatch, cache, capsys)
    assert code == 1
    assert err.strip() == (
        f"error: the compile cache {cache} cannot be a folder: {cache} is a file, not a "
        f"folder; delete it (rm {cache}) or set TORCHINDUCTOR_CACHE_DIR to another folder"
    )
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_a_compile_cache_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    """A cache where nothing can be written (a read-only file system; here sysfs, which
    refuses even root) ended in `unexpected InductorError: OSError ... Read-only file
    system`; now it is named with the fix."""
    from qwen3_trn_helpers.errors import AssetError
    from qwen3_trn_helpers.training.compile import check_compile_cache

    if not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs here (Linux only)")
    cache = Path("/sys/kernel/qwen3-trn-inductor")
    with pytest.raises(AssetError) as refused:
        check_compile_cache("TORCHINDUCTOR_CACHE_DIR", cache)
    said = str(refused.value)
    assert said.startswith(f"the compile cache {cache} cannot be written (")
    assert said.endswith(
        f"make it writable, delete it (rm -r {cache}) or set TORCHINDUCTOR_CACHE_DIR to "
        "another folder"
    )
    # a named folder of inductor's replaced by a file is named too
    cache = tmp_path / "inductor"
    cache.mkdir()
    (cache / "fxgraph").write_text("x")
    with pytest.raises(AssetError, match=r"cannot be written \(a file where a folder belongs"):
        check_compile_cache("TORCHINDUCTOR_CACHE_DIR", cache)
    check_compile_cache("TORCHINDUCTOR_CACHE_DIR", tmp_path / "fresh" / "inductor")  # made
    assert (tmp_path / "fresh" / "inductor").is_dir()


def test_a_damaged_cache_entry_is_named_with_the_folder(tmp_path):
    """Random bytes in a cache entry: inductor's error names the entry's path (torch
    2.14: ``InductorError: ... Failed to import <cache>/yq/cyq....py``): the line names
    the folder and says to delete it; an error elsewhere is left alone."""
    from qwen3_trn_helpers.training.compile import cache_fault

    cache = tmp_path / "inductor"
    entry = cache / "yq" / "cyqs7rzg7pzn35swhoztb3wq5uggh6nzlbrabsljhn4gpm22qtnz.py"
    try:
        try:
            raise SyntaxError(f"source code string cannot contain null bytes ({entry})")
        except SyntaxError as inner:
            raise RuntimeError(f"Failed to import {entry}") from inner
    except RuntimeError as e:
        said = cache_fault(e, cache)
    assert said is not None and said.startswith(f"the compile cache {cache} holds a damaged entry")
    assert said.endswith(
        f"delete the folder (rm -r {cache}) and run again: the next run compiles afresh"
    )
    assert cache_fault(RuntimeError("shape mismatch in aten.mm"), cache) is None


def test_an_unreadable_cache_entry_warns_in_one_line(tmp_path, caplog):
    """Random bytes in an FX graph entry: inductor logged a traceback per graph (two on
    the terminal in the probe) and compiled again; now one line names the folder."""
    import logging
    import pickle

    from qwen3_trn_helpers.training.compile import short_cache_warnings

    logger = logging.getLogger("torch._inductor.codecache")
    with short_cache_warnings(tmp_path), caplog.at_level(logging.WARNING, logger=logger.name):
        try:
            pickle.loads(b"^garbage")
        except pickle.UnpicklingError:
            logger.warning("fx graph cache unable to load compiled graph", exc_info=True)
    [record] = caplog.records
    assert record.getMessage() == (
        f"the compile cache {tmp_path} holds an entry that cannot be read (UnpicklingError); "
        f"compiling that graph again (rm -r {tmp_path} if this repeats)"
    )
    assert record.exc_info is None and "Traceback" not in caplog.text


# --- a lost rank's node is named -------------------------------------------------------


def test_a_lost_peer_names_its_node(monkeypatch):
    """A rank killed on one node: the others said "a node stopped" without naming which;
    now the node (its rank in the job, host name and address), from gloo's error and
    the nodes the ranks reported at start."""
    from qwen3_trn_helpers.training import ranks
    from qwen3_trn_helpers.training.run_scope import peer_lost_message

    gloo = "[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:35456."
    monkeypatch.setenv("GROUP_RANK", "0")
    monkeypatch.setattr(ranks, "JOB_NODES", [("0", "trn2-a"), ("1", "localhost")])
    said = peer_lost_message(gloo)
    assert said.startswith(
        "another rank of the job stopped or became unreachable (node 1 (localhost) at "
        "127.0.0.1 stopped, failed or lost its network)"
    )
    # three nodes, an address none of them has: the address at least
    monkeypatch.setattr(ranks, "JOB_NODES", [("0", "a"), ("1", "b.invalid"), ("2", "c.invalid")])
    assert "(the node at 10.9.8.7 stopped" in peer_lost_message(
        gloo.replace("127.0.0.1", "10.9.8.7")
    )
    # no address in the error, two nodes: the other one
    monkeypatch.setattr(ranks, "JOB_NODES", [("0", "trn2-a"), ("1", "trn2-b")])
    assert "(node 1 (trn2-b) stopped" in peer_lost_message("Connection reset by peer")


def test_the_stop_line_says_what_the_folder_holds(tmp_path):
    """After a stop the terminal names the steps metrics.jsonl holds and the checkpoint,
    never "every completed step is in metrics.jsonl" over a folder without one."""
    from qwen3_trn_helpers.errors import Terminated
    from qwen3_trn_helpers.runs.torchrun import finalise_after_stop

    run = tmp_path / "run"
    run.mkdir()
    assert finalise_after_stop(run, Terminated(), None) == "no step completed; no metrics.jsonl"
    (run / "metrics.jsonl").write_text("")
    assert (
        finalise_after_stop(run, Terminated(), None)
        == "no step completed; metrics.jsonl holds no step"
    )
    lines = [json.dumps({"step": s, "loss": 1.0}) for s in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "run.json").write_text(json.dumps({"status": "running", "agent": None}))
    assert finalise_after_stop(run, KeyboardInterrupt(), 1234) == "steps 1-3 are in metrics.jsonl"
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["steps_completed"]) == ("interrupted", 3)
