"""Job files at real size: the HyperPod PyTorchJob, each node's setup (NxD Training's
train_setup.sh), the cluster's own paths (--workdir, --python) written as data, and the
fabric check's Slurm lines (every rank, the job's own port, nccom-test where installed).

The fabric check's arithmetic and its verdicts are in tests/e2e/test_fabric.py."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.ops.jobs.kubernetes import (
    HYPERPOD_AUTO_RESUME,
    HYPERPOD_MAX_RETRY,
    pytorchjob_manifest,
    trainjob_manifests,
)
from qwen3_trn_helpers.ops.jobs.slurm import NODE_SETUP, slurm_script
from qwen3_trn_helpers.training.spec import RunSpec

TRN2 = RunSpec(nproc=64, nnodes=2, out="/fsx/runs/q4b", device="neuron", preset="4b")


@pytest.fixture(scope="module")
def validate():
    schema = pytest.importorskip("pytorchjob_schema", reason="kubeflow-training not installed")
    return schema.validate_pytorchjob


# --- HyperPod ------------------------------------------------------------------------------


def test_hyperpod_pytorchjob_is_what_aws_documents_and_valid(validate):
    job = pytorchjob_manifest(TRN2, on_trn2=True, image="registry/qwen3-trn:0.2", hyperpod=True)
    validate(job)  # the training operator's own models, strictly
    meta = job["metadata"]
    assert meta["namespace"] == "kubeflow"  # auto-resume watches kubeflow or hyperpod*
    assert meta["annotations"] == {HYPERPOD_AUTO_RESUME: "true", HYPERPOD_MAX_RETRY: "3"}
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    pod = worker["template"]["spec"]
    assert worker["restartPolicy"] == "OnFailure" and pod["restartPolicy"] == "OnFailure"
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "ml.trn2.48xlarge",  # HyperPod's label value
        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
    }
    # no Volcano on HyperPod: a pod naming a scheduler the cluster lacks stays Pending
    assert "schedulerName" not in pod and "schedulingPolicy" not in job["spec"]["runPolicy"]
    command = pod["containers"][0]["command"][-1]
    assert "--rdzv-timeout 1800" in command  # a replaced node passes health checks first
    assert "--resume auto --max-restarts 3" in command
    # the plain PyTorchJob is unchanged: trn2.48xlarge, Volcano, no annotations
    plain = pytorchjob_manifest(TRN2, on_trn2=True, image="registry/qwen3-trn:0.2")
    plain_pod = plain["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert plain_pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "trn2.48xlarge"}
    assert plain_pod["schedulerName"] == "volcano" and "annotations" not in plain["metadata"]


def test_hyperpod_namespace_is_kubeflow_or_prefixed_hyperpod():
    for namespace in ("kubeflow", "hyperpod-ns-team-a", "hyperpod"):
        job = pytorchjob_manifest(TRN2, on_trn2=True, image="img", hyperpod=True,
                                  namespace=namespace)  # fmt: skip
        assert job["metadata"]["namespace"] == namespace
    with pytest.raises(ConfigError) as refused:
        pytorchjob_manifest(TRN2, on_trn2=True, image="img", hyperpod=True, namespace="default")
    assert "\n" not in str(refused.value)
    assert "only in the kubeflow namespace or one prefixed hyperpod" in str(refused.value)


def test_hyperpod_cli_prints_the_manifest_and_needs_pytorchjob(capsys):
    import yaml

    argv = ["k8s", "--nnodes", "2", "--device", "cpu", "--out", "/fsx/r", "--image", "img",
            "--steps", "2", "--hyperpod"]  # fmt: skip
    assert main([*argv, "--api", "pytorchjob", "--max-restarts", "5", "--resume", "auto",
                 "--checkpoint-interval", "10"]) == 0  # fmt: skip
    (job,) = yaml.safe_load_all(capsys.readouterr().out)
    assert job["metadata"]["annotations"][HYPERPOD_MAX_RETRY] == "5"
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    # a CPU job: no instance type, still only nodes HyperPod found healthy
    assert pod["nodeSelector"] == {"sagemaker.amazonaws.com/node-health-status": "Schedulable"}
    assert main(argv) != 0  # trainjob is the default --api
    assert "--hyperpod writes a PyTorchJob" in capsys.readouterr().err


# --- --workdir and --python: the cluster's paths, written as data --------------------------


def _stubs(tmp_path: Path, **bodies: str) -> dict[str, str]:
    """An environment whose PATH starts with stub commands (each a bash body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in bodies.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "CALLS": str(tmp_path / "calls.txt"), "SLURM_JOB_ID": "42",
            "SLURM_JOB_NODELIST": "node[1-2]"}  # fmt: skip


SLURM_STUBS = {
    "scontrol": '[ "$1 $2" = "show hostnames" ] && printf "node1\\nnode2\\nnode3\\n"; '
    '[ "$1 $2" = "show node" ] && echo "NodeName=node1 NodeAddr=n1.x"; true',
    "getent": 'case "$2" in node3) echo "10.0.0.3 STREAM";; *) echo "10.0.0.${2: -1} STREAM";; '
    "esac",
    "srun": 'printf "%s\\0" srun "$@" >> "$CALLS"; printf "\\n" >> "$CALLS"',
}


def test_workdir_and_python_are_data_in_the_slurm_script(tmp_path):
    """A working folder and a Python path that try to run commands: the script gives
    them to the nodes verbatim and runs nothing of theirs."""
    workdir = tmp_path / 'w $(touch PWNED1) `touch PWNED2` "; touch PWNED3; "'
    workdir.mkdir()
    python = "/opt/venv/bin/python'; touch PWNED4; '"
    spec = RunSpec(nproc=1, nnodes=2, out=str(tmp_path / "out"), device="cpu")
    text = slurm_script(spec, on_trn2=False, python=python, workdir=str(workdir))
    done = subprocess.run(["bash", "-c", text], cwd=tmp_path, capture_output=True, text=True,
                          env=_stubs(tmp_path, **SLURM_STUBS))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("PWNED*"))
    calls = [line.split("\0")[:-1] for line in (tmp_path / "calls.txt").read_text().splitlines()]
    check = next(c for c in calls if "check" in c)
    assert check[check.index("check") + 1 : check.index("check") + 3] == [python, str(workdir)]
    train = calls[-1]
    assert train[train.index("--kill-on-bad-exit=1") + 2] == python  # the cluster's Python


def test_workdir_and_python_must_be_absolute(capsys):
    argv = ["slurm", "--nnodes", "2", "--device", "cpu", "--out", "/fsx/r", "--steps", "2"]
    assert main([*argv, "--workdir", "relative/dir"]) != 0
    err = capsys.readouterr().err.strip()
    assert "--workdir 'relative/dir' must be an absolute path" in err and "\n" not in err
    assert main([*argv, "--python", "python3"]) != 0
    assert "--python 'python3' must be an absolute path" in capsys.readouterr().err
    assert main([*argv, "--workdir", "/fsx/me", "--python", "/fsx/venv/bin/python"]) == 0
    text = capsys.readouterr().out
    assert "workdir=/fsx/me" in text and "python=/fsx/venv/bin/python" in text
    assert "out=/fsx/r" in text  # an absolute --out stays where it is
    with pytest.raises(ConfigError, match="control character"):
        slurm_script(RunSpec(nproc=1, nnodes=2, out="/fsx/r", device="cpu"), on_trn2=False,
                     python="/opt/py\nthon", workdir="/fsx")  # fmt: skip


def test_k8s_python_and_workdir_are_data(validate):
    python = "/opt/venv/bin/python; rm -rf /fsx"
    workdir = "/fsx/code $(id)"
    job = pytorchjob_manifest(TRN2, on_trn2=True, image="img", python=python, workdir=workdir)
    validate(job)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    words = shlex.split(container["command"][-1])
    assert words[:2] == ["exec", python] and words[2:4] == ["-m", "qwen3_trn_helpers"]
    assert container["workingDir"] == workdir  # Kubernetes' field: no shell reads it
    runtime, trainjob = trainjob_manifests(TRN2, on_trn2=True, image="img", python=python,
                                           workdir=workdir)  # fmt: skip
    assert shlex.split(trainjob["spec"]["trainer"]["command"][-1])[1] == python
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert pod["template"]["spec"]["containers"][0]["workingDir"] == workdir
    # by default: python on the image's PATH, the image's own folder
    default = pytorchjob_manifest(TRN2, on_trn2=True, image="img")
    container = default["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert shlex.split(container["containers"][0]["command"][-1])[1] == "python"
    assert "workingDir" not in container["containers"][0]
    with pytest.raises(ConfigError, match="--python 'venv/bin/python' must be an absolute"):
        pytorchjob_manifest(TRN2, on_trn2=True, image="img", python="venv/bin/python")
    with pytest.raises(ConfigError, match="--workdir 'code' must be an absolute"):
        pytorchjob_manifest(TRN2, on_trn2=True, image="img", workdir="code")


# --- node setup (NxD Training's train_setup.sh) -------------------------------------------


def _setup(tmp_path: Path, reserved: str, *, lctl: bool, sudo_ok: bool = True):
    bodies = {
        "sysctl": f'[ "$1" = -n ] && echo "{reserved}"; true',
        "sudo": 'printf "%s " "$@" >> "$CALLS"; echo >> "$CALLS"; '
        + ("true" if sudo_ok else "exit 1"),
    }
    if lctl:
        bodies["lctl"] = "true"
    tmp_path = tmp_path / f"case-{len(list(tmp_path.glob('case-*')))}"  # its own stubs
    tmp_path.mkdir()
    env = _stubs(tmp_path, **bodies)
    if not lctl:  # only the stubs and the shell's own tools: no lctl anywhere on PATH
        assert subprocess.run(["bash", "-c", "command -v lctl"], env=env).returncode != 0
    done = subprocess.run(["bash", "-c", NODE_SETUP, "setup", "29542"], env=env,
                          capture_output=True, text=True)  # fmt: skip
    calls = tmp_path / "calls.txt"
    said = calls.read_text().splitlines() if calls.exists() else []
    calls.unlink(missing_ok=True)
    return done, said


def test_node_setup_caps_fsx_and_reserves_the_port(tmp_path):
    done, said = _setup(tmp_path, "41000", lctl=True)
    assert done.returncode == 0 and done.stderr == ""
    assert said == [
        "-n lctl set_param osc.*.max_dirty_mb=64 ",
        "-n sysctl -w net.ipv4.ip_local_reserved_ports=41000,29542 ",  # added, not replaced
    ]
    # no Lustre client (or a container without the host's tools): said in one line;
    # the port already reserved: left alone
    done, said = _setup(tmp_path, "29542,41000", lctl=False)
    assert (done.returncode, said) == (0, [])
    assert done.stderr.startswith("warning: node ") and done.stderr.count("\n") == 1
    assert "no lctl here (not a Lustre client, or inside a container)" in done.stderr
    # no sudo rights: one warning per setting, and the job goes on
    done, said = _setup(tmp_path, "", lctl=True, sudo_ok=False)
    assert done.returncode == 0
    assert "lctl set_param osc.*.max_dirty_mb=64 refused" in done.stderr
    assert "port 29542 not reserved" in done.stderr
    assert said[1] == "-n sysctl -w net.ipv4.ip_local_reserved_ports=29542 "


def test_trn2_script_sets_nodes_up_before_the_fabric_check():
    text = slurm_script(TRN2.replace(out="runs/q4b"), on_trn2=True,
                        python="/fsx/venv/bin/python", workdir="/fsx/me")  # fmt: skip
    setup = text.index(shlex.quote(NODE_SETUP))
    assert text.index('check "$python"') < setup < text.index("qwen3_trn_helpers smoke")
    assert 'setup "$port"' in text
    cpu = slurm_script(TRN2.replace(device="cpu", out="runs/q4b"), on_trn2=False,
                       python="/fsx/venv/bin/python", workdir="/fsx/me")  # fmt: skip
    assert "lctl" not in cpu and "nccom-test" not in cpu


# --- the fabric check's lines --------------------------------------------------------------


def test_fabric_check_runs_every_rank_on_the_jobs_own_port():
    text = slurm_script(TRN2.replace(nnodes=4, out="runs/q4b"), on_trn2=True,
                        python="/fsx/venv/bin/python", workdir="/fsx/me")  # fmt: skip
    smoke = text[text.index("-m qwen3_trn_helpers smoke") : text.index("\nfi\n")]
    assert "--nnodes 4 --nproc 64" in smoke  # 64 ranks on each node, not one
    assert '--rdzv-endpoint "$head_ip:$port"' in smoke and "port + " not in text
    assert "--fabric-floor" not in smoke  # trn2's default floor, stated in the comment
    assert "floor 25% of each node's own EFA (its instance type's)" in text
    # nccom-test where installed, through srun on the job's allocation; our check otherwise
    assert "if command -v nccom-test >/dev/null 2>&1; then" in text
    floored = slurm_script(TRN2.replace(out="runs/q4b"), on_trn2=True, python="/p/python",
                           workdir="/fsx/me", fabric_floor=150)  # fmt: skip
    assert '--out "$fabric_out" --fabric-floor 150' in floored
    assert '--floor 150 --job-id "$SLURM_JOB_ID"' in floored
    # in a container (Pyxis) the host has our Python only inside it: our check alone
    contained = slurm_script(TRN2.replace(out="runs/q4b"), on_trn2=True, workdir="/fsx/me",
                             container_image="registry#qwen3-trn:0.2")  # fmt: skip
    assert "nccom-test" not in contained and "--nproc 64" in contained


def _nccom_run(tmp_path: Path, bw: float, efa_ok: bool = True):
    """The trn2 script's nccom-test branch run as the batch host would: srun, scontrol,
    getent and nccom-test stubs (nccom-test reports ``bw`` GB/s); this machine's EFA
    devices taken as its instance type's (or half of them)."""
    spec = TRN2.replace(nnodes=3, out=str(tmp_path / "out"))
    text = slurm_script(spec, on_trn2=True, python=sys.executable, workdir=str(tmp_path))
    nccom = ('printf "%s " "$@" >> "$CALLS"; echo >> "$CALLS"; '
             f'echo "Avg bus bandwidth:      {bw}GB/s"')  # fmt: skip
    # srun runs the EFA count for real (here, once: each node's), records the rest
    srun = ('if [ "${*: -1}" = efa ]; then "${@: -4}"; exit $?; fi; '
            + SLURM_STUBS["srun"])  # fmt: skip
    env = _stubs(tmp_path, **{**SLURM_STUBS, "srun": srun, "nccom-test": nccom})
    env["PYTHONPATH"] = f"{tmp_path / 'site'}:{Path(__file__).resolve().parents[3]}"
    # this machine as a trn2.48xlarge with all 16 EFA devices up, or 8 (sitecustomize)
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "from qwen3_trn_helpers.ops import efa\n"
        "efa.node_efa = lambda root=None: efa.NodeEfa('trn2.48xlarge', 16, 3200.0, "
        f"{16 if efa_ok else 8})\n"
    )
    done = subprocess.run(["bash", "-c", text], cwd=tmp_path, capture_output=True, text=True,
                          env=env)  # fmt: skip
    calls = (tmp_path / "calls.txt").read_text() if (tmp_path / "calls.txt").exists() else ""
    (tmp_path / "calls.txt").unlink(missing_ok=True)
    return done, calls


def test_nccom_branch_uses_srun_mode_and_a_slow_fabric_stops_the_job(tmp_path):
    """nccom-test over all three nodes through srun on the job's allocation (--slurm-mode,
    --slurm-job-id: no MPI, no ssh); at 300 GB/s against trn2's 100 GB/s floor the job
    trains; at 20 GB/s it fails, after the per-node check that names the node."""
    done, calls = _nccom_run(tmp_path, 300.0)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "-N 3 -r 192 -b 268435456 -e 268435456 -d fp32 allr --slurm-mode --slurm-job-id 42" in calls
    )
    assert "--hosts" not in calls and "NEURON_RT_ROOT_COMM_ID" not in calls
    assert "ok: all 3 nodes (192 ranks): nccom-test bus bandwidth 300.00 GB/s" in done.stdout
    assert (
        "ok: node " in done.stdout and "16 of trn2.48xlarge's 16 EFA devices active" in done.stdout
    )
    assert "qwen3_trn_helpers\0train" in calls
    done, calls = _nccom_run(tmp_path, 20.0)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "fail: all 3 nodes (192 ranks): nccom-test bus bandwidth 20.00 GB/s" in done.stdout
    assert "qwen3_trn_helpers\0smoke" in calls  # the per-node check, to name the node
    assert "qwen3_trn_helpers\0train" not in calls  # the job stopped before training


def test_a_node_with_half_its_efa_down_fails_before_nccom_test(tmp_path):
    """8 of a trn2.48xlarge's 16 EFA devices up: that node fails by name, whatever the
    bandwidth would have said, and the job never trains."""
    done, calls = _nccom_run(tmp_path, 300.0, efa_ok=False)
    assert done.returncode != 0
    assert (
        "fail: node " in done.stdout and "8 of trn2.48xlarge's 16 EFA devices active" in done.stdout
    )
    assert "nccom-test" not in calls and "qwen3_trn_helpers\0train" not in calls


def _train_call(calls_text: str) -> list[str]:
    calls = [line.split("\0")[:-1] for line in calls_text.splitlines()]
    return next(c for c in calls if "train" in c)


def test_hyperpod_auto_resume_where_the_cluster_has_it(tmp_path):
    """AWS's torchtitan sbatch: ``srun --auto-resume=1`` where /opt/sagemaker_cluster
    exists (run here with that path pointed at a folder that does, or does not)."""
    spec = RunSpec(nproc=1, nnodes=2, out=str(tmp_path / "out"), device="cpu")
    text = slurm_script(spec, on_trn2=False, python=sys.executable, workdir=str(tmp_path))
    assert "hyperpod_marker=/opt/sagemaker_cluster\n" in text
    for present in (False, True):
        marker = tmp_path / ("sagemaker_cluster" if present else "absent")
        if present:
            marker.mkdir()
        here = text.replace("hyperpod_marker=/opt/sagemaker_cluster", f"hyperpod_marker={marker}")
        done = subprocess.run(["bash", "-c", here], cwd=tmp_path, capture_output=True,
                              text=True, env=_stubs(tmp_path, **SLURM_STUBS))  # fmt: skip
        assert done.returncode == 0, done.stderr
        train = _train_call((tmp_path / "calls.txt").read_text())
        (tmp_path / "calls.txt").unlink()
        assert (train[1] == "--auto-resume=1") is present, train
        assert ("HyperPod cluster: srun --auto-resume=1" in done.stdout) is present


def test_under_pyxis_setup_runs_on_the_host_and_the_fabric_log_is_mounted(tmp_path):
    """In a container the node setup runs on the host (``command srun``, without the
    image: lctl and sysctl are the host's), and the fabric check's folder is beside the
    run folder, inside what every container mounts (not where sbatch ran)."""
    spec = TRN2.replace(out=str(tmp_path / "shared" / "run"))
    text = slurm_script(spec, on_trn2=True, workdir=str(tmp_path),
                        container_image="registry#qwen3-trn:0.2")  # fmt: skip
    setup = next(line for line in text.splitlines() if 'setup "$port"' in line)
    assert setup.startswith("command srun --ntasks-per-node=1 bash -c ")
    assert 'fabric_out="$out-fabric-$SLURM_JOB_ID"' in text
    mounts = next(line for line in text.splitlines() if "--container-mounts" in line)
    assert f"{tmp_path / 'shared'}:{tmp_path / 'shared'}" in mounts
    bare = slurm_script(spec, on_trn2=True, workdir=str(tmp_path), python=sys.executable)
    assert next(ln for ln in bare.splitlines() if 'setup "$port"' in ln).startswith("srun ")
