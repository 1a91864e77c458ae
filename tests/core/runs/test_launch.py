"""One launch builder and one folder claim (issue 33).

runs/launch.py builds every torchrun command line and its ranks' environment (train,
the smoke ladder, AWS's fork); runs/folder.py ``claim`` takes a run folder for a rank
and for a launcher. No training here: the commands are compared, the folders laid out by
hand, so each check takes milliseconds.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers.errors import RunFolderError
from qwen3_trn_helpers.runs.folder import Settled, claim
from qwen3_trn_helpers.runs.launch import (
    FRESH_STORE_EACH_ROUND,
    child_environment,
    torchrun,
    torchrun_command,
)
from qwen3_trn_helpers.runs.neuron_cores import CLASS_SLICE_ENV
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec

PACKAGE = Path(__file__).resolve().parents[3] / "qwen3_trn_helpers"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _modules() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(PACKAGE)): ast.parse(path.read_text())
        for path in PACKAGE.rglob("*.py")
    }


def test_one_module_writes_the_torchrun_command_line():
    """``torch.distributed.run`` appears as a value (not in a docstring) in
    runs/launch.py only: every other launch goes through its builder."""
    writers = set()
    for name, tree in _modules().items():
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and "torch.distributed.run" in node.value
                and id(node) not in docstrings
            ):
                writers.add(name)
    assert writers == {"runs/launch.py"}, writers


def test_one_module_takes_a_run_folder():
    """Holding a folder (own_run_folder) and settling it (settle_run_folder) happen in
    runs/folder.py only, inside ``claim`` for every way of running."""
    callers = set()
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = getattr(node.func, "id", getattr(node.func, "attr", None))
                if called in ("own_run_folder", "settle_run_folder"):
                    callers.add(name)
    assert callers == {"runs/folder.py"}, callers


def test_torchrun_on_one_node_on_several_and_with_restarts():
    entry = ["-m", "pkg", "arg"]
    assert torchrun(entry, nproc=2) == [*TORCHRUN, "--standalone", "--nproc-per-node=2", *entry]
    named = torchrun(entry, nproc=2, nnodes=1, python="py", max_restarts=3)
    assert named == ["py", "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                     "--max-restarts=3", "--nproc-per-node=2", *entry]  # fmt: skip
    nodes = torchrun(entry, nproc=1, nnodes=4, rdzv_endpoint="h:29400", rdzv_timeout=60)
    assert nodes == [*TORCHRUN, "--nnodes=4", "--rdzv-backend=c10d", "--rdzv-endpoint=h:29400",
                     "--rdzv-conf=join_timeout=60", "--nproc-per-node=1", *entry]  # fmt: skip


def test_torchrun_keeps_raw_ranks_in_a_class_share(monkeypatch):
    entry = ["-m", "pkg"]
    monkeypatch.delenv(CLASS_SLICE_ENV, raising=False)
    assert torchrun(entry, nproc=2, in_share=True) == torchrun(entry, nproc=2)
    monkeypatch.setenv(CLASS_SLICE_ENV, "8-15")
    shared = torchrun(entry, nproc=2, in_share=True)
    start = shared.index("--nproc-per-node=2") + 1
    assert shared[start : start + 2] == ["--no-python", "bash"] and shared[-2:] == entry
    assert "$(( 8 + LOCAL_RANK ))" in shared[start + 3]


def test_trains_command_is_the_builders_with_the_ranks_spec():
    spec = RunSpec(nproc=2, nnodes=2, rdzv_endpoint="h:29400", rdzv_timeout=90, out="/r",
                   resume="auto", checkpoint_interval=5, max_restarts=1)  # fmt: skip
    cmd = torchrun_command(plan_run(spec, device_type="cpu"), out="/x", overwrite="")
    ranks = cmd.index("qwen3_trn_helpers")
    assert cmd[:ranks] == torchrun(["-m"], nproc=2, nnodes=2, rdzv_endpoint="h:29400",
                                   rdzv_timeout=90, max_restarts=1)  # fmt: skip
    argv = cmd[ranks:]
    assert argv[:3] == ["qwen3_trn_helpers", "train", "--no-progress"]
    assert argv[argv.index("--out") + 1] == "/x" and argv.count("--out") == 1
    assert argv[-1] == "--overwrite"
    assert not {"--nproc", "--nnodes", "--rdzv-endpoint", "--max-restarts"} & set(argv)


def test_child_environment_adds_only_what_it_is_asked(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv(CLASS_SLICE_ENV, raising=False)
    plain = child_environment(neuron=False)
    assert "OMP_NUM_THREADS" not in plain and "HF_HUB_OFFLINE" not in plain
    assert not FRESH_STORE_EACH_ROUND.keys() & plain.keys()
    env = child_environment(neuron=False, threads=3, offline=True, fresh_store=True)
    assert env["OMP_NUM_THREADS"] == "3" and env["HF_HUB_OFFLINE"] == "1"
    assert env.items() >= FRESH_STORE_EACH_ROUND.items()
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # the user's own setting wins
    assert child_environment(neuron=False, threads=1)["OMP_NUM_THREADS"] == "5"
    assert "NEURON_LOGICAL_NC_CONFIG" not in env
    neuron = child_environment(neuron=True)
    assert neuron["NEURON_LOGICAL_NC_CONFIG"] in ("1", "2")
    monkeypatch.setenv(CLASS_SLICE_ENV, "8-15")
    one = child_environment(neuron=True, one_process=True)
    assert one["NEURON_RT_VISIBLE_CORES"] == "8"  # a one-process child: the share's first


def _plan(out: Path, **fields):
    spec = RunSpec(preset="tiny", steps=4, checkpoint_interval=2, out=str(out), **fields)
    return plan_run(spec, device_type="cpu")


def _earlier_run(out: Path, checkpoint_step: int) -> None:
    out.mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"status": "completed", "spec": {}, "resolved": {}}))
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    step_dir = out / "checkpoint" / f"step-{checkpoint_step}"
    step_dir.mkdir(parents=True)
    (step_dir / ".metadata").write_bytes(b"")


@pytest.mark.parametrize("launcher", [False, True])
def test_a_claim_holds_the_folder_while_it_lasts(tmp_path, monkeypatch, launcher):
    """A run in this process and one node's launcher alike: the folder is made, cleared
    for a fresh start, held (a second claim is refused, naming the holder) and free
    again afterwards."""
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    plan = _plan(out)
    with claim(plan, launcher=launcher) as taken:
        assert taken.out == out and taken.settled == Settled() and out.is_dir()
        with pytest.raises(RunFolderError, match="being written by a run still in progress"):
            with claim(plan, launcher=launcher):
                pass
    with claim(plan, launcher=launcher) as again:
        assert again.settled == Settled()


def test_a_claim_on_several_nodes_leaves_the_folder_to_the_jobs_rank_0(tmp_path, monkeypatch):
    """One node's launcher of several neither holds nor settles (the job's rank 0 does,
    once); a launched rank 0 of several nodes holds it."""
    out = tmp_path / "run"
    _earlier_run(out, checkpoint_step=4)
    plan = plan_run(
        RunSpec(preset="tiny", steps=4, checkpoint_interval=2, out=str(out), nproc=1,
                nnodes=2, rdzv_endpoint="h:29400", resume="auto"),
        device_type="cpu",
    )  # fmt: skip
    with claim(plan, launcher=True) as first, claim(plan, launcher=True) as second:
        assert first.settled == second.settled == Settled(4)  # not "finished": not decided
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("QWEN3_TRN_LAUNCHER_PID", raising=False)
    with claim(plan) as taken:
        assert taken.settled == Settled(resumed_from=4, finished=True)
        with pytest.raises(RunFolderError, match="being written"):
            with claim(plan):
                pass


# --- what the launcher asked, its ranks do not ask again (issue 47) -------------------------


def test_only_the_launcher_asks_this_machines_free_memory(monkeypatch, tmp_path):
    """A CPU run larger than the free memory is refused where it starts; a rank torchrun
    started does not ask again: the ranks that started before it already hold part of
    the very memory it would count, so its answer would refuse a run its launcher let
    through."""
    from qwen3_trn_helpers.errors import ConfigError
    from qwen3_trn_helpers.runs import here
    from qwen3_trn_helpers.runs import run as run_module
    from qwen3_trn_helpers.runs.reporter import Reporter

    monkeypatch.setattr(run_module, "available_memory_gib", lambda: 0.25)
    monkeypatch.setattr(here, "run_here", lambda plan, reporter: "trained")
    spec = RunSpec(steps=1, nproc=2, device="cpu", out=str(tmp_path))
    with pytest.raises(ConfigError, match="more than the 0.2 GiB free"):
        run_module.execute(plan_run(spec), Reporter(progress=False))
    for name, value in dict(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2").items():
        monkeypatch.setenv(name, value)  # a rank torchrun started
    assert run_module.execute(plan_run(spec), Reporter(progress=False)) == "trained"
