"""Several nodes: torchrun's c10d rendezvous for real (two agents on this machine, a
real Slurm when one runs here), HSDP layouts, job files, and resuming on other ranks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.ops.jobs.common import TRN2_NODE_ENV
from qwen3_trn_helpers.ops.jobs.kubernetes import (
    TRN2_POD_ENV,
    pytorchjob_manifest,
    trainjob_manifests,
)
from qwen3_trn_helpers.ops.jobs.slurm import slurm_script
from qwen3_trn_helpers.runs import rendezvous
from qwen3_trn_helpers.training.metrics_file import read_metrics
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.ranks import free_port, version_mismatch
from qwen3_trn_helpers.training.spec import RunSpec

STEPS = 6  # long enough for the Slurm job to be requeued and lose a rank mid-run
#: one CPU thread per rank in the reference and the Slurm job alike: the launcher gives
#: each rank cores // ranks-on-this-node threads, and another thread count sums in
#: another order (bf16 losses then differ by ~1e-4)
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def train_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "qwen3_trn_helpers", "train", "--no-progress", *args]


def losses(out: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> Path:
    """The reference: the same run on one node with 2 ranks."""
    out = tmp_path_factory.mktemp("one-node") / "run"
    subprocess.run(
        train_cmd("--nproc", "2", "--steps", str(STEPS), "--out", str(out)),
        check=True, capture_output=True, timeout=300, env=ONE_THREAD,
    )  # fmt: skip
    return out


# --- plans ---------------------------------------------------------------------------


def test_full_size_presets_replicate_across_nodes():
    for variant, preset, inner in (
        ("native", "4b", "TP 4 x FSDP 16"),
        ("nki_moe", "30b-a3b", "FSDP 64"),
    ):
        spec = RunSpec(variant=variant, preset=preset, nproc=64, nnodes=2, out="x")
        plan = plan_run(spec, device_type="neuron")
        assert (plan.world_size, plan.dp_replicate, str(plan.layout)) == (
            128, 2, f"HSDP 2 x ({inner})"
        )  # fmt: skip
        one = plan_run(spec.replace(nnodes=1), device_type="neuron")
        # each rank holds what it holds on one node
        assert plan.memory().total_gib == pytest.approx(one.memory().total_gib)
        assert "HSDP" in plan.layout_reason
    assert "expert parallelism" in plan.layout_reason  # the MoE preset says why not EP


def test_small_presets_shard_over_the_whole_world():
    plan = plan_run(RunSpec(nproc=1, nnodes=2, out="x"), device_type="cpu")
    assert (plan.world_size, plan.dp_replicate, plan.fsdp) == (2, 1, 2)


def test_endpoint_must_be_host_and_port():
    for bad in ("10.0.0.5", "10.0.0.5:", ":29500", "host:99999", "host:port"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            RunSpec(nnodes=2, rdzv_endpoint=bad, out="x").validate()
    RunSpec(nnodes=2, rdzv_endpoint="[fe80::1]:29500", out="x").validate()


# --- refusing what cannot work, before anything starts ---------------------------------


def test_loopback_endpoint_refused_where_nodes_are_separate_hosts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.100.0.1")  # pods: never one loopback
    argv = ["train", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29500", "--out", str(tmp_path)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: rdzv_endpoint 127.0.0.1:29500 is a loopback")
    assert "first node's network address" in err[0]
    assert not (tmp_path / "run.json").exists()


def test_slurm_nodes_on_other_hosts_refuse_loopback(monkeypatch):
    env = {"SLURM_JOB_NODELIST": "trn2-[1-2]"}
    monkeypatch.setattr(rendezvous, "slurm_node_addresses", lambda nodes: ["10.0.0.1", "10.0.0.2"])
    assert rendezvous.nodes_are_separate_hosts(env)
    with pytest.raises(ConfigError, match="loopback"):
        rendezvous.check_endpoint_reachable_by_all("localhost:29500", env)
    rendezvous.check_endpoint_reachable_by_all("10.0.0.1:29500", env)  # a real address
    # a Slurm whose nodes all live on this machine (CI's) may meet at 127.0.0.1
    monkeypatch.setattr(rendezvous, "slurm_node_addresses", lambda nodes: ["127.0.0.1"] * 2)
    rendezvous.check_endpoint_reachable_by_all("127.0.0.1:29500", env)


def test_version_mismatch_names_the_node_and_both_versions():
    ours = {"torch": "2.14.1", "torchtitan": "0.3.0", "torch-neuronx": None}
    reports = [{"node": "0", "host": "a", "versions": ours}] * 2
    assert version_mismatch(reports) is None
    theirs = dict(ours, torchtitan="0.2.2+neuron.1")
    problem = version_mismatch([*reports, {"node": "1", "host": "b", "versions": theirs}])
    assert problem.startswith("torchtitan differs between nodes: 0.2.2+neuron.1 on node 1 (b)")
    assert "0.3.0 on node 0 (a)" in problem and "same versions on every node" in problem


# --- two torchrun agents on this machine: a real multi-node rendezvous -------------------


@pytest.mark.long
@pytest.mark.slow
def test_two_agents_one_folder_same_losses_as_one_node(tmp_path, one_node):
    out = tmp_path / "shared"  # both "nodes" get the same --out, as on shared storage
    endpoint = f"127.0.0.1:{free_port()}"
    cmd = train_cmd("--nnodes", "2", "--rdzv-endpoint", endpoint, "--nproc", "1",
                    "--steps", str(STEPS), "--out", str(out))  # fmt: skip
    agents = [  # one thread per rank, as in the reference (ONE_THREAD says why)
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ONE_THREAD
        )
        for _ in range(2)
    ]
    outputs = [agent.communicate(timeout=300)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    assert losses(out) == pytest.approx(losses(one_node), abs=1e-5)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, STEPS + 1))
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed"
    assert (info["resolved"]["ranks"], info["resolved"]["nodes"]) == (2, 2)
    # exactly one node wrote the plot; each node kept its own launch log
    assert sum("plot:" in text for text in outputs) == 1 and (out / "loss.png").stat().st_size
    assert len(list(out.glob("launch-*.log"))) == 2


#: a rank of two agents' job: its first round leaves a key in the store its ranks share
#: and fails; the restarted round says whether it finds that key
_ROUND_WORKER = """
import os
import time
from datetime import timedelta
import torch.distributed as dist
rank, shared = int(os.environ["RANK"]), os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                      is_master=rank == 0 and not shared, timeout=timedelta(seconds=60))
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    store.set(f"left by round 0, rank {rank}", "x")
    store.add("arrived", 1)
    store.wait(["arrived"])
    while int(store.get("arrived")) < 2:
        time.sleep(0.05)
    raise SystemExit(1)
print("stale key:", store.check([f"left by round 0, rank {1 - rank}"]), flush=True)
store.add("done", 1)
while int(store.get("done")) < 2:  # (rank 0 may host the store: it leaves last)
    time.sleep(0.05)
"""


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("fresh", [False, True], ids=["torchrun-default", "our-launch"])
def test_restarted_ranks_get_a_fresh_store(tmp_path, fresh):
    """Still needed while torchrun's default hands a restarted round the store of the
    round before (runs/launch.py FRESH_STORE_EACH_ROUND): restarted gloo ranks then read
    dead ranks' addresses. If the default check fails, torch fixed it: drop the setting."""
    from qwen3_trn_helpers.runs.launch import FRESH_STORE_EACH_ROUND

    worker = tmp_path / "worker.py"
    worker.write_text(_ROUND_WORKER)
    env = {k: v for k, v in os.environ.items() if k not in FRESH_STORE_EACH_ROUND}
    env.update(FRESH_STORE_EACH_ROUND if fresh else {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
           "--max-restarts=1", str(worker)]  # fmt: skip
    agents = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for _ in range(2)
    ]
    outputs = [agent.communicate(timeout=180)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    seen = sorted(ln for out in outputs for ln in out.splitlines() if "stale key:" in ln)
    assert seen == [f"stale key: {not fresh}"] * 2, outputs


@pytest.mark.slow
@pytest.mark.long
def test_smoke_checks_the_collectives_between_two_nodes(tmp_path):
    """`qwen3-trn smoke --nnodes 2 --rdzv-endpoint` on each node: one rank per node, the
    collectives rung across them, one line per node; no other rung climbs."""
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "smoke", "--json", "--nnodes", "2",
           "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--out", str(tmp_path)]  # fmt: skip
    agents = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [agent.communicate(timeout=300) for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    reasons = []
    for (stdout, _), node in zip(outputs, sorted(tmp_path.iterdir()), strict=True):
        ladder = json.loads(stdout)  # each node's own smoke.json, in its own folder
        assert ladder == json.loads((node / "smoke.json").read_text())
        [rung] = ladder["rungs"]
        assert (rung["name"], rung["status"]) == ("collectives", "pass"), rung
        reasons.append(rung["reason"])
    host = os.uname().nodename
    for n, reason in enumerate(sorted(reasons)):
        head, _, bandwidth = reason.partition("; ")
        rung = "2 ranks on cpu (gloo): all_reduce and an FSDP2 step"
        assert head == f"node {n} of 2 ({host}): {rung}"
        assert re.match(r"bus bandwidth [0-9.]+ GB/s \(its best node pair", bandwidth), reason


def test_smoke_on_several_nodes_refuses_what_cannot_work(tmp_path, capsys):
    out = ["--out", str(tmp_path / "s")]
    assert main(["smoke", "--nnodes", "2", *out]) == 1
    assert capsys.readouterr().err.startswith("error: smoke on 2 nodes needs --rdzv-endpoint")
    endpoint = ["--rdzv-endpoint", "10.0.0.5:29600"]
    assert main(["smoke", "--nnodes", "2", *endpoint, "--rung", "compile", *out]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: with --nnodes the ladder climbs only the collectives rung, across the nodes; "
        "climb the other rungs on each node without --nnodes"
    ]
    assert main(["smoke", "--nnodes", "2", "--rdzv-endpoint", "host:0", *out]) == 1
    assert "HOST:PORT" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()  # refused before anything starts


@pytest.mark.slow
@pytest.mark.long
def test_sigterm_to_one_node_ends_the_whole_job(tmp_path):
    """scancel, `timeout` or Kubernetes stopping one node: every process of both nodes
    ends, the other node says a rank went away, metrics.jsonl stays valid."""
    import signal

    out = tmp_path / "run"
    cmd = train_cmd("--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                    "--nproc", "1", "--steps", "300", "--out", str(out))  # fmt: skip
    agents = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    deadline = time.monotonic() + 180
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        assert time.monotonic() < deadline and all(a.poll() is None for a in agents)
        time.sleep(0.2)
    agents[0].send_signal(signal.SIGTERM)
    errors = [agent.communicate(timeout=120)[1] for agent in agents]
    assert [agent.returncode for agent in agents] == [143, 1], errors
    assert "another rank of the job stopped or became unreachable" in errors[1]
    leftovers = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert leftovers.stdout == "", leftovers.stdout
    records = read_metrics(metrics)
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    assert json.loads((out / "run.json").read_text())["status"] in ("terminated", "failed")


def test_a_lost_peer_is_recognised():
    import torch.distributed as dist

    from qwen3_trn_helpers.training.run_scope import lost_peer

    gloo = "[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:35456."
    assert lost_peer(RuntimeError(gloo)) and lost_peer(dist.DistNetworkError("timeout"))
    assert not lost_peer(RuntimeError("Expected all tensors to be on the same device"))


@pytest.mark.slow
@pytest.mark.long
def test_a_node_that_never_joins_is_named(tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    proc = subprocess.run(
        train_cmd("--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-timeout", "6",
                  "--steps", "1", "--out", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the job's 2 nodes did not all join the rendezvous at ")
    assert endpoint in last
    # the seconds are measured, not --rdzv-timeout restated (torchrun may give up earlier)
    waited = re.search(r" in (\d+) s \(--rdzv-timeout 6; 1 of 2 nodes joined\)", last)
    assert waited and 6 <= int(waited.group(1)) < 60, last
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.long
def test_resume_on_another_rank_count(tmp_path):
    """Saved by 2 ranks, resumed by 1 (a node lost): model and optimizer reshard, and
    the data goes on (tests/core/data/test_global_order.py compares the samples)."""
    out = str(tmp_path / "run")
    saves = ("--checkpoint-interval", "2", "--out", out)
    first = subprocess.run(
        train_cmd("--nproc", "2", "--steps", "2", *saves),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    resumed = subprocess.run(
        train_cmd("--nproc", "1", "--steps", "4", *saves, "--resume"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "the data order restarts" not in resumed.stderr
    assert [r["step"] for r in read_metrics(Path(out) / "metrics.jsonl")] == [1, 2, 3, 4]
    assert json.loads((Path(out) / "run.json").read_text())["status"] == "completed"


# --- a real Slurm: sbatch the generated script -------------------------------------------


def slurm_here() -> bool:
    if shutil.which("sbatch") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0


def job_state(job_id: str) -> dict[str, str]:
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
    ).stdout
    return dict(re.findall(r"(?:^| )(JobState|ExitCode)=(\S+)", shown))


def wait_for(what: str, ready, job_id: str, log: Path, timeout: float = 300):
    """Poll ``ready()`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        state = job_state(job_id)
        done = state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
        text = log.read_text() if log.exists() else ""
        assert not done and time.monotonic() < deadline, f"{what}: {state}\n{text}"
        time.sleep(0.3)
    return value


def start_requeued_now(job_id: str) -> None:
    """Start a requeued job now instead of after Slurm's BeginTime hold (~2 minutes),
    once its nodes are idle and a second has passed: slurmd revokes the first
    attempt's credential, and an attempt allocated within the same second is refused
    with it ("Killing non-startable batch JobId=4: Job credential revoked", requeued at
    17:33:09.216 and allocated at .786 in a CI run); that hold exists for this."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, check=True
        ).stdout.split()
        if states and all(state == "idle" for state in states):
            break
        time.sleep(0.3)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True)


def steps_logged(out: Path) -> list[int]:
    metrics = out / "metrics.jsonl"
    return [r["step"] for r in read_metrics(metrics)] if metrics.exists() else []


def a_rank_of(out: Path) -> int | None:
    """The pid of a training rank (a child of a torchrun agent) of the run in ``out``."""
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_cmd = Path(f"/proc/{parent}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if str(out).encode() in cmd and b"torch.distributed.run" in parent_cmd:
            return int(proc.name)
    return None


@pytest.mark.slow
@pytest.mark.long
def test_slurm_job_survives_requeue_and_a_killed_rank(tmp_path, one_node):
    """The printed script, submitted as printed from another folder: `scontrol requeue`
    mid-run (every rank saves its step on SIGTERM, the same script reruns and resumes),
    then a rank killed with SIGKILL (torchrun restarts the ranks, which resume); the job
    completes with steps 1..N once each and the losses of an uninterrupted run."""
    import signal

    if not slurm_here():
        if os.environ.get("QWEN3_TRN_REQUIRE_SLURM"):
            pytest.fail("no Slurm here (scripts/local_slurm.sh start), and CI requires it")
        pytest.skip("no Slurm here: `scripts/local_slurm.sh start` runs one on this machine")
    out = tmp_path / "shared" / "slurm-run"  # a folder nobody created: the script makes it
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    argv = ["slurm", "--nnodes", "2", "--nproc", "1", "--device", "cpu",
            "--steps", str(STEPS), "--checkpoint-interval", "1", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", *argv], capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    (submit_dir / "job.sbatch").write_text(proc.stdout)
    job_id = (
        subprocess.run(
            ["sbatch", "--parsable", "job.sbatch"],
            cwd=submit_dir,
            capture_output=True,
            text=True,
            check=True,
        )  # fmt: skip
        .stdout.strip()
        .split(";")[0]
    )
    log = submit_dir / f"qwen3-trn-{job_id}.out"
    try:
        # 1. requeued mid-run: every rank saves its step on SIGTERM
        wait_for("a first step", lambda: steps_logged(out), job_id, log)
        subprocess.run(["scontrol", "requeue", job_id], check=True)
        wait_for("the requeue", lambda: job_state(job_id).get("JobState") == "PENDING",
                 job_id, log)  # fmt: skip
        saved = json.loads((out / "run.json").read_text())
        # Slurm holds a requeued job back (BeginTime, ~2 minutes): start it now
        start_requeued_now(job_id)
        # 2. a rank of the resumed attempt killed once it trains a step past its
        # checkpoint (mid-run, not while the ranks connect): torchrun restarts the ranks
        resumed_at = wait_for(
            "the resumed attempt's rank",
            lambda: "attempt 2 of job" in log.read_text()
            and json.loads((out / "run.json").read_text()).get("status") == "running"
            and max(steps_logged(out) or [0]) > saved["steps_completed"]
            and a_rank_of(out),
            job_id, log,
        )  # fmt: skip
        os.kill(resumed_at, signal.SIGKILL)
        state = wait_for(
            "the job's end",
            lambda: (s := job_state(job_id)).get("JobState") in ("COMPLETED", "FAILED") and s,
            job_id, log, timeout=900,
        )  # fmt: skip
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    text = log.read_text()
    assert state == {"JobState": "COMPLETED", "ExitCode": "0:0"}, text
    logs = "".join(p.read_text() for p in out.glob("launch-*.log"))  # each node's, each attempt
    # requeued: every rank saved its step on SIGTERM
    assert "terminated: stopped by signal 15: checkpoint of step" in logs, logs[-3000:]
    assert saved["status"] == "terminated", saved
    # the killed rank's agent saw it die and torchrun started the ranks again (its own
    # "will restart" line is logged at a level the launch log does not show)
    assert "failed (exitcode: -9)" in logs, logs[-3000:]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["resumed_from_step"] >= 1, info
    assert steps_logged(out) == list(range(1, STEPS + 1))  # each step once
    # Under this Slurm the 2-node losses differ from one node's by up to 2.2e-4 from step
    # 2 on, the same in steps trained before any fault (measured, two jobs, 1 or 2
    # threads): the job's environment, not the resume (two agents outside Slurm, with or
    # without checkpoints and --resume auto, match one node exactly). A wrong resume (the
    # data order restarted, a step trained twice) moves a loss by more than 1e-2.
    assert losses(out) == pytest.approx(losses(one_node), abs=5e-4)
    assert "rendezvous: 127.0.0.1:" in text  # the head node's NodeAddr, resolved
    # each attempt checked the fabric between the nodes before training, each node said so
    for node in (0, 1):
        said = re.findall(
            rf"pass +collectives +[\d.]+s  node {node} of 2 \(.*\): 2 ranks on cpu", text
        )
        assert len(said) == 2, text


@pytest.mark.slow
@pytest.mark.long
def test_slurm_job_saves_inside_the_time_limit_warning(tmp_path, one_node):
    """The time-limit warning (Slurm's --signal, sent here by hand with `scancel
    --signal=USR1 --batch`) mid-run, with a checkpoint interval longer than the run:
    every rank saves the step it is in and leaves cleanly, the script requeues the job,
    and the requeued job resumes from the step saved on the warning (it had requeued at
    once, and the ranks had torchrun's 30 s to save)."""
    if not slurm_here():
        if os.environ.get("QWEN3_TRN_REQUIRE_SLURM"):
            pytest.fail("no Slurm here (scripts/local_slurm.sh start), and CI requires it")
        pytest.skip("no Slurm here: `scripts/local_slurm.sh start` runs one on this machine")
    out = tmp_path / "shared" / "warned-run"
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    argv = ["slurm", "--nnodes", "2", "--nproc", "1", "--device", "cpu",
            "--steps", str(STEPS), "--checkpoint-interval", "100", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", *argv], capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    (submit_dir / "job.sbatch").write_text(proc.stdout)
    job_id = subprocess.run(
        ["sbatch", "--parsable", "job.sbatch"], cwd=submit_dir, capture_output=True,
        text=True, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    log = submit_dir / f"qwen3-trn-{job_id}.out"
    try:
        wait_for("a first step", lambda: steps_logged(out), job_id, log)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
        wait_for("the requeue", lambda: job_state(job_id).get("JobState") == "PENDING",
                 job_id, log)  # fmt: skip
        warned = json.loads((out / "run.json").read_text())
        saved = sorted(p.name for p in (out / "checkpoint").glob("step-*"))
        start_requeued_now(job_id)
        state = wait_for(
            "the job's end",
            lambda: (s := job_state(job_id)).get("JobState") in ("COMPLETED", "FAILED") and s,
            job_id, log, timeout=900,
        )  # fmt: skip
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    text = log.read_text()
    assert state == {"JobState": "COMPLETED", "ExitCode": "0:0"}, text
    assert "time limit near" in text and "requeueing: the run saved its step" in text, text
    # every rank saved the step it was in and left cleanly (no interval reached it)
    assert warned["status"] == "stopped", warned
    stopped_at = warned["steps_completed"]
    assert 1 <= stopped_at < STEPS and saved == [f"step-{stopped_at}"], (warned, saved)
    logs = "".join(p.read_text() for p in out.glob("launch-*.log"))
    assert "failed (exitcode" not in logs, logs[-3000:]  # torchrun restarted nothing
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["resumed_from_step"] == stopped_at, info
    assert steps_logged(out) == list(range(1, STEPS + 1))  # each step once
    assert losses(out) == pytest.approx(losses(one_node), abs=5e-4)  # (as the test above)
    assert not (out / "save-and-stop").exists()


# --- the job files ------------------------------------------------------------------------


def test_slurm_script_for_trn2(tmp_path):
    spec = RunSpec(nproc=64, nnodes=4, init="pretrained", out="runs/q4b", device="neuron")
    text = slurm_script(spec, on_trn2=True, python="/fsx/venv/bin/python", workdir="/fsx/me")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)  # valid shell
    assert "#SBATCH --nodes=4" in text and "#SBATCH --exclusive" in text
    assert "hostname --ip-address" not in text and "NodeAddr=" in text
    for key, value in TRN2_NODE_ENV.items():
        assert f"export {key}={value}" in text
    # the root communicator is rank 0's: left to torch-neuronx, never pinned to the head
    # node (tests/e2e/test_torch_neuronx_double.py launches two agents to show it)
    assert "export NEURON_RT_ROOT_COMM_ID" not in text and "ulimit -n 65535" in text
    assert "unset NEURON_RT_ROOT_COMM_ID" in text
    # survives: requeue, a signal ahead of the time limit, auto-resume at a stated interval
    # (the warning's lead time comes from the 4B checkpoint: test_checkpoint_recovery.py)
    assert "#SBATCH --requeue" in text and "#SBATCH --signal=B:USR1@420" in text
    assert 'scontrol requeue "$SLURM_JOB_ID"' in text
    # sbatch from any folder: the log where sbatch runs, --out made by the script
    sbatch = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert "#SBATCH --output=qwen3-trn-%j.out  # where sbatch runs: a folder that exists" in sbatch
    assert not any("/" in ln.split("#")[1] for ln in sbatch)  # no user path on those lines
    assert "out=/fsx/me/runs/q4b" in text and 'mkdir -p -- "$out"' in text
    srun = text[text.rindex("srun ") :]
    assert '--out "$out"' in srun  # one folder for every node
    assert "--nnodes 4" in srun and "--nproc 64" in srun
    assert "--resume auto --max-restarts 3" in srun and "--checkpoint-interval 100" in srun
    assert '--rdzv-endpoint "$head_ip:$port" &' in srun
    # the fabric between the nodes is checked first (smoke's collectives rung across them)
    fabric = text[
        text.index("-m qwen3_trn_helpers smoke") : text.index("-m qwen3_trn_helpers train")
    ]
    # every rank of every node, on the job's own port (no second port to collide)
    assert "--nnodes 4 --nproc 64 --rdzv-timeout 600" in fabric
    assert '"$head_ip:$port"' in fabric and "port + " not in text
    cpu = slurm_script(spec.replace(device="cpu", checkpoint_interval=5), on_trn2=False)
    assert "FI_PROVIDER" not in cpu and "--exclusive" not in cpu
    assert "--checkpoint-interval 5 " in cpu
    with pytest.raises(ConfigError, match="nnodes=2 or more"):
        slurm_script(spec.replace(nnodes=1), on_trn2=True)
    with pytest.raises(ConfigError, match="drop overwrite=True"):
        slurm_script(spec.replace(overwrite=True), on_trn2=True)


def run_script(text: str, tmp_path: Path, *, getent: str = "") -> subprocess.CompletedProcess:
    """The script under bash with Slurm's commands stubbed: each records its arguments
    (one per line) to calls.txt; srun runs the path check it is given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stubs = {
        "scontrol": 'echo "scontrol $*" >> "$CALLS"; [ "$1 $2" = "show hostnames" ] && '
        'echo node1; [ "$1 $2" = "show node" ] && echo "NodeName=node1 NodeAddr=n1.x"; true',
        "getent": f'echo "getent $*" >> "$CALLS"; {getent or "exit 2"}',
        "srun": 'printf "%s\\n" srun "$@" >> "$CALLS"',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "CALLS": str(tmp_path / "calls.txt"),
           "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-2]"}  # fmt: skip
    return subprocess.run(
        ["bash", "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def test_slurm_script_falls_back_to_the_node_address_under_set_e(tmp_path):
    """getent cannot resolve the head's NodeAddr: the script goes on with the name."""
    spec = RunSpec(nproc=1, nnodes=2, out=str(tmp_path / "out"), device="cpu")
    done = run_script(slurm_script(spec, on_trn2=False, workdir=str(tmp_path)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rendezvous: n1.x:29542 (node1)" in done.stdout
    calls = (tmp_path / "calls.txt").read_text()
    assert "--rdzv-endpoint\nn1.x:29542" in calls and (tmp_path / "out").is_dir()


def test_slurm_path_check_names_the_node_and_the_path(tmp_path):
    """The check the script gives srun, run here as one node would: a missing path and
    a missing Python are each named with the node."""
    spec = RunSpec(nproc=1, nnodes=2, out=str(tmp_path / "out"), device="cpu")
    text = slurm_script(spec, on_trn2=False, workdir=str(tmp_path))
    check = text[text.index("bash -c ") :].split("\n")[0].removeprefix("bash -c ").rstrip(" \\")
    import shlex

    script = shlex.split(check)[0]
    missing = subprocess.run(["bash", "-c", script, "check", sys.executable, "/no/such/dir"],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"error: node {os.uname().nodename}: /no/such/dir does not exist there (mount the "
        "shared storage on every node)"
    )
    no_python = subprocess.run(["bash", "-c", script, "check", "/no/python", str(tmp_path)],
                               capture_output=True, text=True)  # fmt: skip
    assert "/no/python is not an executable Python there" in no_python.stderr
    ok = subprocess.run(["bash", "-c", script, "check", sys.executable, str(tmp_path)])
    assert ok.returncode == 0


def test_job_files_on_trn2_take_a_nodes_cores(capsys):
    """`--device neuron --preset 4b` without --nproc: 64 ranks per node, not a refusal."""
    argv = ["slurm", "--nnodes", "2", "--device", "neuron", "--preset", "4b", "--out", "/fsx/r",
            "--steps", "2", "--allow-hub-corpus"]  # fmt: skip
    assert main(argv) == 0
    assert "--nproc 64" in capsys.readouterr().out


@pytest.fixture(scope="module")
def validate():
    schema = pytest.importorskip("pytorchjob_schema", reason="kubeflow-training not installed")
    return schema.validate_pytorchjob


def guaranteed(resources: dict, devices: dict[str, str]) -> None:
    """requests == limits for cpu and memory (Guaranteed QoS), hugepages, the devices."""
    assert resources["requests"] == resources["limits"]
    limits = resources["limits"]
    assert {"cpu", "memory", "hugepages-2Mi"} <= set(limits)
    assert {k: limits[k] for k in devices} == devices


def test_pytorchjob_for_trn2_is_valid(validate):
    spec = RunSpec(nproc=64, nnodes=2, out="/fsx/runs/q4b", device="neuron")
    manifest = pytorchjob_manifest(spec, on_trn2=True, image="registry/qwen3-trn:0.2", efa=8)
    validate(manifest)
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]
    pod = worker["template"]["spec"]
    container = pod["containers"][0]
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "OnFailure"
    guaranteed(
        container["resources"], {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "8"}
    )
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CCOM_SOCKET_IFNAME"] == "eth0" and env.items() >= TRN2_POD_ENV.items()
    assert env["TORCH_NEURONX_NEFF_CACHE_DIR"] == "/fsx/runs/neff-cache"  # shared volume
    assert pod["schedulerName"] == "volcano" and pod["terminationGracePeriodSeconds"] == 300
    assert manifest["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == 3
    command = container["command"][-1]
    assert '--rdzv-endpoint "$PET_RDZV_ENDPOINT"' in command
    assert "--resume auto --max-restarts 3" in command and "--checkpoint-interval 100" in command
    validate(pytorchjob_manifest(spec.replace(device="cpu"), on_trn2=False, image="img"))
    # the validator is strict: a misspelt field and a wrong type are both refused
    container["comand"] = container.pop("command")
    worker["replicas"] = "2"
    with pytest.raises(ValueError) as refused:
        validate(manifest)
    assert "containers[0].comand: unknown field" in str(refused.value)
    assert "Worker.replicas" in str(refused.value)


def test_trainjob_for_trn2_is_valid():
    schema = pytest.importorskip("trainjob_schema", reason="kubeflow-trainer-api not installed")
    spec = RunSpec(nproc=64, nnodes=2, out="/fsx/runs/q4b", device="neuron", init="pretrained")
    runtime, job = trainjob_manifests(spec, on_trn2=True, image="registry/qwen3-trn:0.2")
    for obj in (runtime, job):
        schema.validate_trainer_object(obj)
    trainer = job["spec"]["trainer"]
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    assert trainer["numNodes"] == 2
    guaranteed(
        trainer["resourcesPerNode"],
        {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16"},
    )
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["CCOM_SOCKET_IFNAME"] == "eth0"
    assert env["TORCH_NEURONX_NEFF_CACHE_DIR"] == "/fsx/runs/neff-cache"
    command = trainer["command"][-1]
    assert command.endswith('--rdzv-endpoint "$PET_MASTER_ADDR:$PET_MASTER_PORT"')
    assert "--resume auto --max-restarts 3" in command
    rt = runtime["spec"]
    assert rt["podGroupPolicy"] == {"volcano": {}}  # gang scheduling
    assert rt["template"]["spec"]["failurePolicy"] == {"maxRestarts": 3}
    pod = rt["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 300
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "trn2.48xlarge"}
    # strict: a misspelt field, a wrong type and an unknown key deep in the pod refused
    trainer["comand"] = trainer.pop("command")
    trainer["numNodes"] = "2"
    pod["containers"][0]["imagePulPolicy"] = "Always"
    problems = []
    for obj in (runtime, job):
        with pytest.raises(ValueError) as refused:
            schema.validate_trainer_object(obj)
        problems.append(str(refused.value))
    assert "containers[0].imagePulPolicy: unknown field" in problems[0]
    assert "TrainJob.spec.trainer.comand: unknown field" in problems[1]
    assert "numNodes: Input should be a valid integer" in problems[1]


def test_k8s_cli_prints_both_apis(capsys):
    import yaml

    argv = ["k8s", "--nnodes", "2", "--device", "cpu", "--out", "/fsx/r", "--image", "img",
            "--steps", "2"]  # fmt: skip
    assert main(argv) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == ["TrainingRuntime", "TrainJob"]  # Trainer v2 by default
    assert main([*argv, "--api", "pytorchjob"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["PyTorchJob"]


def test_pytorchjob_needs_the_shared_volume():
    with pytest.raises(ConfigError, match="/fsx"):
        pytorchjob_manifest(RunSpec(nnodes=2, out="runs/x"), on_trn2=True, image="img")
