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
from qwen3_trn_helpers.runs import rendezvous
from qwen3_trn_helpers.runs.schedulers import (
    TRN2_NODE_ENV,
    TRN2_RESOURCES,
    pytorchjob_manifest,
    slurm_script,
)
from qwen3_trn_helpers.training.metrics_file import read_metrics
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.ranks import free_port, version_mismatch
from qwen3_trn_helpers.training.spec import RunSpec

STEPS = 3


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
        check=True, capture_output=True, timeout=300,
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
        assert (plan.world_size, plan.dp_replicate, plan.layout) == (
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


@pytest.mark.slow
def test_two_agents_one_folder_same_losses_as_one_node(tmp_path, one_node):
    out = tmp_path / "shared"  # both "nodes" get the same --out, as on shared storage
    endpoint = f"127.0.0.1:{free_port()}"
    cmd = train_cmd("--nnodes", "2", "--rdzv-endpoint", endpoint, "--nproc", "1",
                    "--steps", str(STEPS), "--out", str(out))  # fmt: skip
    agents = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [agent.communicate(timeout=300)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    assert losses(out) == pytest.approx(losses(one_node), abs=1e-5)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed"
    assert (info["resolved"]["ranks"], info["resolved"]["nodes"]) == (2, 2)
    # exactly one node wrote the plot; each node kept its own launch log
    assert sum("plot:" in text for text in outputs) == 1 and (out / "loss.png").stat().st_size
    assert len(list(out.glob("launch-*.log"))) == 2


@pytest.mark.slow
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

    from qwen3_trn_helpers.training.trainer import lost_peer

    gloo = "[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:35456."
    assert lost_peer(RuntimeError(gloo)) and lost_peer(dist.DistNetworkError("timeout"))
    assert not lost_peer(RuntimeError("Expected all tensors to be on the same device"))


@pytest.mark.slow
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
    assert "within 6 s (1 of 2 nodes joined)" in last and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_resume_on_another_rank_count(tmp_path):
    """Saved by 2 ranks, resumed by 1 (a node lost): model and optimizer reshard."""
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
    notes = [ln for ln in resumed.stderr.splitlines() if ln.startswith("note: the checkpoint")]
    assert len(notes) == 1 and "2 data-parallel ranks and this run has 1" in notes[0]
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


@pytest.mark.slow
def test_slurm_job_on_two_nodes_matches_one_node(tmp_path, one_node):
    if not slurm_here():
        if os.environ.get("QWEN3_TRN_REQUIRE_SLURM"):
            pytest.fail("no Slurm here (scripts/local_slurm.sh start), and CI requires it")
        pytest.skip("no Slurm here: `scripts/local_slurm.sh start` runs one on this machine")
    out = tmp_path / "slurm-run"
    script = tmp_path / "job.sbatch"
    argv = ["slurm", "--nnodes", "2", "--nproc", "1", "--device", "cpu",
            "--steps", str(STEPS), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", *argv], capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    script.write_text(proc.stdout)
    out.mkdir()  # sbatch opens --output's folder before the job starts
    job_id = (
        subprocess.run(
            ["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .split(";")[0]
    )
    deadline = time.monotonic() + 300
    state = job_state(job_id)
    while state.get("JobState") in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
        assert time.monotonic() < deadline, f"Slurm job {job_id} still {state}"
        time.sleep(0.5)
        state = job_state(job_id)
    log = (out / f"slurm-{job_id}.out").read_text()
    assert state == {"JobState": "COMPLETED", "ExitCode": "0:0"}, log
    assert "rendezvous: 127.0.0.1:" in log  # the head node's NodeAddr, resolved
    assert losses(out) == pytest.approx(losses(one_node), abs=1e-5)
    assert json.loads((out / "run.json").read_text())["resolved"]["nodes"] == 2


# --- the job files ------------------------------------------------------------------------


def test_slurm_script_for_trn2(tmp_path):
    spec = RunSpec(nproc=64, nnodes=4, init="pretrained", out="runs/q4b", device="neuron")
    text = slurm_script(spec, on_trn2=True, python="/fsx/venv/bin/python")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)  # valid shell
    assert "#SBATCH --nodes=4" in text and "#SBATCH --exclusive" in text
    assert "hostname --ip-address" not in text and "NodeAddr=" in text
    for key, value in TRN2_NODE_ENV.items():
        assert f"export {key}={value}" in text
    srun = text[text.index("srun ") :]
    assert f"--out {Path('runs/q4b').absolute()}" in srun  # one folder for every node
    assert "--nnodes 4" in srun and "--nproc 64" in srun
    assert srun.rstrip().endswith('--rdzv-endpoint "$head_ip:$port"')
    cpu = slurm_script(spec.replace(device="cpu"), on_trn2=False)
    assert "FI_PROVIDER" not in cpu and "--exclusive" not in cpu
    with pytest.raises(ConfigError, match="--nnodes 2 or more"):
        slurm_script(spec.replace(nnodes=1), on_trn2=True)


@pytest.fixture(scope="module")
def validate():
    schema = pytest.importorskip("pytorchjob_schema", reason="kubeflow-training not installed")
    return schema.validate_pytorchjob


def test_pytorchjob_for_trn2_is_valid(validate):
    spec = RunSpec(nproc=64, nnodes=2, out="/fsx/runs/q4b", device="neuron")
    manifest = pytorchjob_manifest(spec, on_trn2=True, image="registry/qwen3-trn:0.2")
    validate(manifest)
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert worker["replicas"] == 2 and container["resources"]["limits"] == TRN2_RESOURCES
    assert '--rdzv-endpoint "$PET_RDZV_ENDPOINT"' in container["command"][-1]
    validate(pytorchjob_manifest(spec.replace(device="cpu"), on_trn2=False, image="img"))
    # the validator is strict: a misspelt field and a wrong type are both refused
    container["comand"] = container.pop("command")
    worker["replicas"] = "2"
    with pytest.raises(ValueError) as refused:
        validate(manifest)
    assert "containers[0].comand: unknown field" in str(refused.value)
    assert "Worker.replicas" in str(refused.value)


def test_pytorchjob_needs_the_shared_volume():
    with pytest.raises(ConfigError, match="/fsx"):
        pytorchjob_manifest(RunSpec(nnodes=2, out="runs/x"), on_trn2=True, image="img")
