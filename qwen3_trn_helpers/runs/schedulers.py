"""Job files for the schedulers a team already runs: a Slurm batch script, a Kubeflow
TrainJob (Trainer v2, what a plain EKS cluster installs) or PyTorchJob (v1, HyperPod's).

None is a launcher of ours. Each starts, on every node, the same ``qwen3-trn train``
command, which runs torchrun with its c10d rendezvous (runs/torchrun.py): Slurm
through ``srun`` (one task per node), Kubernetes through Kubeflow (one pod per node).
The files are printed for the user to read, edit and submit (``qwen3-trn slurm ... >
job.sbatch; sbatch job.sbatch``).

Jobs survive: every job file runs ``--resume auto`` with a checkpoint interval it
states, so the first run, a requeued one and torchrun's restarted ranks are the same
command; SIGTERM (preemption, ``scontrol requeue``, a pod's eviction) saves the current
step first if it can within the grace (training/stopping.py), and a Slurm job is warned
of its time limit early enough to save a checkpoint of its model's size, then requeues.
Every user value is written as data: control characters are refused, the rest is
quoted for bash (``shlex.quote``) and no user value reaches an ``#SBATCH`` line.

On trn2 each node is a whole trn2.48xlarge (16 Trainium2 chips, 16 EFA interfaces);
the Neuron and EFA settings every node needs come from AWS's multi-node docs, named
where they are set. Cheap to import: text only.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ConfigError
from ..training.compile import NEFF_CACHE_LOCK_TIMEOUT_S, NEFF_CACHE_LOCK_TIMEOUT_VAR
from ..training.spec import RESUME_AUTO, RunSpec

#: every node's environment on trn2. EFA: AWS's torch-neuronx multi-node setup guide
#: (setup-trn1-multi-node-execution); MALLOC_ARENA_MAX: neuronx-distributed-training's
#: examples/train_setup.sh (128)
TRN2_NODE_ENV = {
    "FI_PROVIDER": "efa",  # libfabric over the instance's EFA interfaces, not TCP
    "FI_EFA_USE_DEVICE_RDMA": "1",  # the chips write to EFA directly (RDMA)
    "FI_EFA_FORK_SAFE": "1",  # needed on Amazon Linux 2; harmless elsewhere
    "MALLOC_ARENA_MAX": "128",  # 64 rank processes per node: bound glibc's arenas
}
#: pods on EKS also name the interface the Neuron collectives' bootstrap uses
#: (aws-neuron-eks-samples: CCOM_SOCKET_IFNAME=eth0, "often required on EKS")
TRN2_POD_ENV = {**TRN2_NODE_ENV, "CCOM_SOCKET_IFNAME": "eth0"}
#: open files per process, as neuronx-distributed-training's train_setup.sh raises it
NOFILE = 65535
#: a trn2.48xlarge's devices, as Kubernetes' Neuron and EFA device plugins name them
NEURON_DEVICES = 16
EFA_INTERFACES = 16
#: what a trn2 pod requests (= limits: Guaranteed QoS, evicted last). A trn2.48xlarge
#: has 192 vCPUs and 2 TiB; the rest is left to the kubelet and the device plugins.
#: Hugepages: AWS's EKS EFA examples request 2 MiB hugepages for libfabric (5120Mi)
TRN2_POD_RESOURCES = {"cpu": "184", "memory": "1900Gi", "hugepages-2Mi": "5120Mi"}
CPU_POD_RESOURCES = {"cpu": "4", "memory": "16Gi"}
#: TorchNeuron's persistent NEFF cache folder (torch-neuronx source; default /tmp/neff_cache)
NEFF_CACHE_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
RDZV_PORT = 29500  # torchrun's customary port (MASTER_PORT's default)
SHARED_DIR_K8S = "/fsx"  # where the job mounts shared storage (FSx for Lustre)
#: job files save a checkpoint every this many steps unless --checkpoint-interval says
#: otherwise: about 5-10 minutes of a 4B trn2 step, so a preemption loses little and
#: FSx is not written all the time
JOB_CHECKPOINT_INTERVAL = 100
#: torchrun restarts a node's ranks this many times unless --max-restarts says otherwise
JOB_MAX_RESTARTS = 3
#: Slurm signals the batch script ahead of the time limit (--signal=B:USR1@LEAD): the
#: trap asks every rank to save its step and stop, then requeues the job. LEAD comes
#: from the checkpoint's size (training/stopping.py signal_lead_s, at least 300 s)
#: seconds a pod has after SIGTERM to save its step before SIGKILL
POD_GRACE_S = 300
#: every trn2 node's setup before the job's steps, as neuronx-distributed-training's
#: examples/train_setup.sh does it on Slurm: FSx for Lustre's client caps the dirty
#: cache each connection reserves ("so we avoid OODs", its comment), and the job's port
#: is reserved so that no outgoing connection takes it as its source port (it reserves
#: its MASTER_PORT, 41000). Guarded: a node without lctl (no Lustre) or without sudo
#: rights says so in one warning and goes on; the reservation is added to the node's
#: list, never replacing it. $1: the job's port.
NODE_SETUP = (
    "port=$1; node=$(hostname); "
    "if command -v lctl >/dev/null 2>&1; then "
    "sudo -n lctl set_param 'osc.*.max_dirty_mb=64' >/dev/null 2>&1 || "
    'echo "warning: node $node: lctl set_param osc.*.max_dirty_mb=64 refused (no sudo '
    'rights?); FSx keeps its default" >&2; fi; '
    "reserved=$(sysctl -n net.ipv4.ip_local_reserved_ports 2>/dev/null || true); "
    'case ",$reserved," in *",$port,"*) ;; *) '
    'sudo -n sysctl -w "net.ipv4.ip_local_reserved_ports=${reserved:+$reserved,}$port" '
    '>/dev/null 2>&1 || echo "warning: node $node: port $port not reserved '
    '(net.ipv4.ip_local_reserved_ports needs sudo rights)" >&2;; esac; true'
)
#: SageMaker HyperPod (EKS): what its job auto-resume needs ("Running jobs using
#: kubectl", SageMaker developer guide, sagemaker-hyperpod-eks-run-jobs-kubectl): the two
#: annotations, restartPolicy OnFailure, a node selector for nodes its health checks
#: passed, the kubeflow namespace or one prefixed hyperpod, and Kubeflow Training
#: Operator 1.7.0, 1.8.0 or 1.8.1. HyperPod's nodes carry their ml. instance type.
HYPERPOD_AUTO_RESUME = "sagemaker.amazonaws.com/enable-job-auto-resume"
HYPERPOD_MAX_RETRY = "sagemaker.amazonaws.com/job-max-retry-count"
HYPERPOD_HEALTH = {"sagemaker.amazonaws.com/node-health-status": "Schedulable"}
HYPERPOD_INSTANCE_TYPE = "ml.trn2.48xlarge"
HYPERPOD_NAMESPACE = "kubeflow"
HYPERPOD_OPERATOR_VERSIONS = ("1.7.0", "1.8.0", "1.8.1")
#: a replaced node joins after HyperPod's health checks: AWS's HyperPod guide has
#: torchrun wait 1800 s for the rendezvous (--rdzv-conf=timeout=1800) for that reason
HYPERPOD_RDZV_TIMEOUT_S = 1800


def refuse_control_characters(spec: RunSpec, extra: dict[str, str]) -> None:
    """One line naming the flag that holds a control character (a newline ends a
    comment line in bash, and a job file's meaning with it)."""
    values = {f"--{k.replace('_', '-')}": v for k, v in asdict(spec).items()}
    for flag, value in {**values, **extra}.items():
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ConfigError(
                f"{flag} holds a control character ({value!r}); a job file takes paths and "
                "names without newlines or tabs: rename it"
            )


def _check(spec: RunSpec, **extra: str) -> RunSpec:
    """The spec a job runs: checked, resuming by itself, saving at a stated interval."""
    refuse_control_characters(spec, extra)
    spec.validate()
    if spec.nnodes < 2:
        raise ConfigError(
            f"a job file is for several nodes: pass --nnodes 2 or more, got {spec.nnodes}"
        )
    if spec.rdzv_endpoint is not None:
        raise ConfigError(
            "the job file finds the rendezvous endpoint itself (the first node's "
            "address); drop --rdzv-endpoint"
        )
    if spec.out is None:
        raise ConfigError(
            "a job on several nodes needs --out on storage every node sees (FSx, NFS): "
            "rank 0 writes metrics.jsonl there and every rank its checkpoint shards"
        )
    if spec.overwrite:
        raise ConfigError(
            "a job file resumes by itself (--resume auto) and a requeued job would delete "
            "its own checkpoints with --overwrite: drop --overwrite (choose a new --out)"
        )
    return spec.replace(
        resume=RESUME_AUTO,
        checkpoint_interval=spec.checkpoint_interval or JOB_CHECKPOINT_INTERVAL,
        max_restarts=spec.max_restarts or JOB_MAX_RESTARTS,
    ).validate()


def _train_args(spec: RunSpec, leave_out: tuple[str, ...] = ()) -> list[str]:
    """``qwen3-trn train`` flags for every node, the endpoint left for the script."""
    return ["--no-progress", *spec.to_argv(leave_out=leave_out)]


def _local_paths(spec: RunSpec) -> list[str]:
    """The files and folders the run reads, named by absolute path (checked on each node)."""
    paths = []
    for value in (spec.corpus, spec.tokenizer, spec.init):
        if value and os.path.isabs(value):
            paths.append(value)
    return paths


def slurm_script(
    spec: RunSpec,
    *,
    on_trn2: bool,
    python: str | None = None,
    workdir: str | None = None,
    container_image: str | None = None,
    fabric_floor: float | None = None,
) -> str:
    """An sbatch script that runs ``spec`` on ``spec.nnodes`` nodes and survives.

    ``workdir`` is the folder every step runs in: where the repository is checked out
    on the cluster (shared storage every node mounts); by default the folder this runs
    in, which is right when the script is generated on the cluster itself. ``python``:
    the cluster's interpreter (its venv), by default this one. Both are written as data.
    ``fabric_floor``: the fabric check's floor in GB/s of bus bandwidth per node
    (runs/fabric.py; by default a share of trn2's EFA on trn2, none on a CPU).

    The first allocated node hosts the rendezvous. Its address is the one slurmctld
    reaches it by (NodeAddr), resolved to an IPv4 address on the node itself; never
    ``hostname --ip-address``, which gives 127.0.1.1 on images whose /etc/hosts maps
    the host name there (and ``qwen3-trn train`` refuses a loopback endpoint when the
    job's nodes are different hosts). ``sbatch`` works from any folder: the log goes
    where sbatch runs (Slurm creates no folder), the script makes ``--out`` and checks,
    on every node, each path it needs.
    """
    from .container import CONTAINER_PYTHON, pyxis_lines

    # (in a container: the image's Python, runs/container.py)
    python = python or (CONTAINER_PYTHON if container_image else sys.executable)
    workdir = workdir or os.getcwd()
    _check_cluster_paths(python, workdir, bare_python=False)
    spec = _check(spec, python=python, **{"the working folder": workdir})
    spec = spec.replace(out=os.path.normpath(os.path.join(workdir, spec.out)))
    name = f"qwen3-trn-{spec.variant}".replace("_", "-")
    q = shlex.quote
    warning = time_limit_warning(spec, on_trn2)
    lines = [
        "#!/bin/bash",
        f"# qwen3-trn on {spec.nnodes} nodes x {spec.nproc} ranks: one Slurm task per node, "
        "each running torchrun",
        "# (through `qwen3-trn train`) with the c10d rendezvous on the first node.",
        "# Generated by `qwen3-trn slurm`; submit with `sbatch FILE` from any folder.",
        "#",
        "# Surviving: the run saves a checkpoint every "
        f"{spec.checkpoint_interval} steps (--checkpoint-interval)",
        "# and on SIGTERM; --resume auto continues from the newest one, so a requeued job",
        "# (preemption, a failed node, the time limit) reruns this same script and goes on.",
        f"# torchrun restarts a node's failed ranks up to {spec.max_restarts} times "
        "(--max-restarts).",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={spec.nnodes}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if on_trn2:
        lines += ["#SBATCH --exclusive  # a whole trn2.48xlarge per node: 16 chips, 16 EFA"]
    lines += [
        "#SBATCH --output=qwen3-trn-%j.out  # where sbatch runs: a folder that exists",
        "#SBATCH --open-mode=append  # a requeued job adds to the same log",
        "#SBATCH --requeue  # preempted or its node failed: requeued, not ended",
        f"#SBATCH --signal=B:USR1@{warning.lead_s}  # the time limit is near: see the trap",
        "set -euo pipefail",
        "",
        f"workdir={q(workdir)}",
        f"python={q(python)}",
        f"out={q(spec.out)}",
        'echo "attempt $(( ${SLURM_RESTART_COUNT:-0} + 1 )) of job $SLURM_JOB_ID"',
        'mkdir -p -- "$out"',
        *warning.trap_lines(),
        "",
        "# the first node hosts the rendezvous, at the address Slurm itself reaches it by",
        "# (awk reads every name: head would leave scontrol a closed pipe, and SIGPIPE",
        "# under pipefail ends the script once the node list outgrows one write)",
        "head_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | awk 'NR == 1')",
        'head_addr=$(scontrol show node "$head_node" | grep -oE "NodeAddr=[^ ]+" '
        "| cut -d= -f2) || true",
        "head_addr=${head_addr:-$head_node}",
        "# (|| true: under set -e a name getent cannot resolve would end the script here)",
        "head_ip=$(getent ahostsv4 \"$head_addr\" | awk 'NR == 1 {print $1}') || true",
        "head_ip=${head_ip:-$head_addr}",
        f"port=$(( {RDZV_PORT} + SLURM_JOB_ID % 1000 ))  # one port per job on the head node",
        'echo "rendezvous: $head_ip:$port ($head_node), nodes: $SLURM_JOB_NODELIST"',
    ]
    if on_trn2:
        lines += ["", "# every node: EFA between the instances, Neuron's settings"]
        lines += [f"export {k}={v}" for k, v in TRN2_NODE_ENV.items()]
        lines += [
            "# the Neuron runtime's root communicator is rank 0's, and only torch-neuronx",
            "# knows rank 0: torchrun's c10d rendezvous ranks the nodes in sorted order,",
            "# not the rendezvous host first, and sets MASTER_ADDR to rank 0's address;",
            "# torch-neuronx then sets NEURON_RT_ROOT_COMM_ID=MASTER_ADDR:<a free port",
            "# rank 0 chose> in every rank, but keeps a value it inherits (its",
            "# distributed/backend.py, _set_root_comm_id). So none is set here, and one",
            "# exported where sbatch was run (sbatch passes the environment on) is dropped",
            "unset NEURON_RT_ROOT_COMM_ID",
            f'ulimit -n {NOFILE} || echo "warning: ulimit -n {NOFILE} refused; '
            f'open files stay at $(ulimit -n)"  # train_setup.sh',
        ]
        cache = Path(spec.out).parent / "neff-cache"
        lines += [
            "# one compiled-graph (NEFF) cache on shared storage: every node compiles the",
            "# same graphs, and the second node (and the next job) reads them instead.",
            "# The variable is torch-neuronx's own (its source; its cache writes a temporary",
            "# file and renames it, meant for NFS); delete the line for a per-node cache",
            "# if your version differs",
            f"export {NEFF_CACHE_VAR}={q(str(cache))}",
            "# the cache's lock: a node's ranks wait on one compile of each graph, longer",
            "# than torch-neuronx's 1200 s default at full size (training/compile.py)",
            f"export {NEFF_CACHE_LOCK_TIMEOUT_VAR}={NEFF_CACHE_LOCK_TIMEOUT_S}",
        ]
    if container_image is not None:  # every srun below runs in it (Pyxis)
        shared = [str(Path(spec.out).parent), *_local_paths(spec)]
        lines += pyxis_lines(container_image, shared, workdir)
    needed = ['"$workdir"', '"$out"', *(q(p) for p in _local_paths(spec))]
    check = (
        'py=$1; shift; [ -x "$py" ] || { echo "error: node $(hostname): $py is not an '
        'executable Python there (install the same venv on every node)" >&2; exit 1; }; '
        'for p in "$@"; do [ -e "$p" ] || { echo "error: node $(hostname): $p does not '
        'exist there (mount the shared storage on every node)" >&2; exit 1; }; done'
    )
    lines += [
        "",
        "# every node sees what the run needs (shared storage mounted, the same venv)",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {q(check)} \\",
        f'  check "$python" {" ".join(needed)}',
    ]
    if on_trn2:
        lines += [
            "",
            "# every node's setup, as neuronx-distributed-training's train_setup.sh: FSx's",
            "# dirty cache per connection capped (lctl set_param osc.*.max_dirty_mb=64),",
            "# the job's port reserved (net.ipv4.ip_local_reserved_ports); a node without",
            "# lctl or sudo rights warns and goes on",
            f'srun --ntasks-per-node=1 bash -c {q(NODE_SETUP)} setup "$port"',
        ]
    lines += [
        "",
        'fabric_out="$PWD/qwen3-trn-$SLURM_JOB_ID-fabric"  # beside the log',
        'cd -- "$workdir"',
    ]
    lines += _fabric_lines(spec, on_trn2, container_image is None, fabric_floor)
    cmd = ["-m", "qwen3_trn_helpers", "train", *_train_args(spec, leave_out=("out",))]
    lines += [
        "",
        "# one task per node; a failing node stops the others (--kill-on-bad-exit), and",
        "# scancel's SIGTERM reaches every rank through qwen3-trn and torchrun",
        'srun --kill-on-bad-exit=1 --ntasks-per-node=1 "$python" \\',
        f"  {shlex.join(cmd)} \\",
        '  --out "$out" --rdzv-endpoint "$head_ip:$port" &',
        "srun_pid=$!",
        "# wait again after the USR1 trap interrupts wait; the job's status is srun's",
        'status=0; wait "$srun_pid" || status=$?',
        'while kill -0 "$srun_pid" 2>/dev/null; do status=0; wait "$srun_pid" || status=$?; done',
        "# warned of the time limit: every rank has saved its step and left; go again",
        'if [ -n "$time_limit_near" ]; then',
        '  kill "$backstop" 2>/dev/null || true',
        '  echo "requeueing: the run saved its step before the time limit"',
        '  scontrol requeue "$SLURM_JOB_ID" || true  # (|| true: the backstop was first)',
        "fi",
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class TimeLimitWarning:
    """How early a Slurm job is warned of its time limit, and why: the save of the
    model's checkpoint at an assumed write throughput, with margins
    (training/stopping.py signal_lead_s)."""

    checkpoint_bytes: int
    write_mb_s: float
    lead_s: int

    def trap_lines(self) -> list[str]:
        """The batch script's USR1 trap: ask every rank to save and stop (the run
        folder's stop file, which rank 0 reads at each step's end), requeue once srun
        returns; and should the save outlast the warning, requeue a minute before the
        limit anyway (a job the limit ends is not requeued)."""
        from ..training.stopping import STOP_FILE, save_seconds

        save_s = save_seconds(self.checkpoint_bytes, self.write_mb_s)
        backstop = max(self.lead_s - 60, 1)
        return [
            f"# the time limit is near (USR1, {self.lead_s} s ahead: the checkpoint is "
            f"~{self.checkpoint_bytes / 1e9:.3g} GB, ~{save_s:.0f} s",
            f"# to write at {self.write_mb_s:.0f} MB/s, AWS's sample FSx for Lustre: 1.2 "
            "TiB at 250 MB/s/TiB;",
            "# x1.5, plus 120 s for the step in flight; a faster file system can take less):",
            "# every rank saves its current step and leaves cleanly (the stop file below,",
            "# which rank 0 looks for at each step's end), then the job is requeued",
            f'stop_file="$out"/{STOP_FILE}',
            'rm -f -- "$stop_file"  # a request no earlier attempt lived to act on',
            "time_limit_near= backstop=",
            "on_time_limit() {",
            '  echo "time limit near: every rank saves its step and stops; then requeued"',
            '  time_limit_near=1; touch -- "$stop_file"',
            "  # (should the save outlast the warning: requeued before the limit ends the job)",
            "  ( trap 'kill $! 2>/dev/null; exit 0' TERM",
            f"    sleep {backstop} & wait $!",
            '    echo "the save outlasted the warning: requeueing"',
            '    scontrol requeue "$SLURM_JOB_ID"',
            "  ) & backstop=$!",
            "}",
            "trap on_time_limit USR1",
        ]


def time_limit_warning(spec: RunSpec, on_trn2: bool) -> TimeLimitWarning:
    """The warning ``spec``'s job needs: its model's checkpoint size, planned as the
    job will run (the preset a trn2 job resolves to), at the sample FSx throughput."""
    from ..device import DEVICES, as_device
    from ..training.plan import plan_run
    from ..training.stopping import FSX_SAMPLE_WRITE_MB_S, checkpoint_bytes, signal_lead_s

    # a device named is the nodes'; "auto" is what the job's nodes are (on_trn2)
    named = spec.device in DEVICES
    device = as_device(spec.device) if named else DEVICES["neuron" if on_trn2 else "cpu"]
    nbytes = checkpoint_bytes(plan_run(spec, device_type=device).shape.parameter_count())
    return TimeLimitWarning(nbytes, FSX_SAMPLE_WRITE_MB_S, signal_lead_s(nbytes))


def _check_cluster_paths(python: str, workdir: str, *, bare_python: bool) -> None:
    """``--python`` and ``--workdir`` as the cluster's nodes (or pods) will use them:
    absolute (a pod's Python may be a bare command name its image's PATH finds), and
    without control characters (a newline would end a script's line)."""
    for flag, value in (("--python", python), ("--workdir", workdir)):
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ConfigError(
                f"{flag} holds a control character ({value!r}); a job file takes paths "
                "without newlines or tabs: rename it"
            )
    if not (os.path.isabs(python) or (bare_python and "/" not in python and python)):
        raise ConfigError(
            f"--python {python!r} must be an absolute path on the cluster's nodes (for "
            "example /fsx/venv/bin/python)"
            + (", or a command name the image's PATH finds (python)" if bare_python else "")
        )
    if not os.path.isabs(workdir):
        raise ConfigError(
            f"--workdir {workdir!r} must be an absolute path on the cluster's nodes (for "
            "example /fsx/qwen3-trn)"
        )


def _fabric_lines(spec: RunSpec, on_trn2: bool, on_host: bool, floor: float | None) -> list[str]:
    """The fabric check before training (runs/fabric.py): every rank of every node, an
    all-reduce that measures each node's bus bandwidth, a node below the floor fails the
    job. Its port is the job's own rendezvous port: the check's torchrun has ended on
    every node before the training's starts (srun returns when every task has), and its
    store listens with SO_REUSEADDR, so the port is free again; a second port
    (``port + 2`` before) was one more to collide with another job's on the same host.
    ``on_host``: the steps run on the nodes themselves, not in a container, so trn2's
    nodes may have Neuron's nccom-test, which then measures instead."""
    from .fabric import FLOOR_FRACTION, NEURON_BYTES

    floor_flag = [] if floor is None else ["--fabric-floor", f"{floor:g}"]
    where = (
        f"floor {floor:g} GB/s (--fabric-floor)"
        if floor is not None
        else f"floor {FLOOR_FRACTION:.0%} of trn2's 3.2 Tbps EFA"
        if on_trn2
        else "no floor on a CPU unless --fabric-floor"
    )
    nccom = on_trn2 and on_host
    smoke = [
        "# the fabric between the nodes first, every rank of every node "
        f"({spec.nproc} per node): an",
        "# all_reduce and an FSDP step (the smoke ladder's collectives rung), then an",
        "# all-reduce that measures each node's bus bandwidth (nccl-tests' definition)",
        f"# with its neighbour nodes; one pass/fail line per node, {where}.",
        "# A node that cannot reach the others, or is too slow, fails the job here",
        'srun --ntasks-per-node=1 --kill-on-bad-exit=1 "$python" -m qwen3_trn_helpers smoke \\',
        f"  --nnodes {spec.nnodes} --nproc {spec.nproc} --rdzv-timeout {spec.rdzv_timeout} \\",
        '  --rdzv-endpoint "$head_ip:$port" --out "$fabric_out"'
        + "".join(f" {a}" for a in floor_flag),
    ]
    if not nccom:
        return ["", *smoke]
    nccom_floor = [] if floor is None else ["--floor", f"{floor:g}"]
    return [
        "",
        "# Neuron's own collectives benchmark where it is installed: nccom-test between",
        "# each pair of nodes, from this node (it reaches the others over ssh)",
        "if command -v nccom-test >/dev/null 2>&1; then",
        '  node_ips=$(for h in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do',
        "    getent ahostsv4 \"$h\" | awk 'NR == 1 {print $1}'; done)",
        f'  "$python" -m qwen3_trn_helpers.runs.fabric nccom --nproc {spec.nproc} '
        f"--bytes {NEURON_BYTES} \\",
        f'    --port "$port" {"".join(f"{a} " for a in nccom_floor)}$node_ips',
        "else",
        *("  " + line for line in smoke),
        "fi",
    ]


def _k8s_out(spec: RunSpec) -> str:
    """``--out`` normalised (``..`` resolved) and under the shared volume."""
    out = os.path.normpath(spec.out) if spec.out else ""
    if not os.path.isabs(out) or not Path(out).is_relative_to(SHARED_DIR_K8S):
        raise ConfigError(
            f"--out must be on the shared volume every pod mounts at {SHARED_DIR_K8S} "
            f"(for example {SHARED_DIR_K8S}/runs/qwen3), got {spec.out} (as {out or 'empty'})"
        )
    return out


#: a Kubernetes name for the objects we write: an RFC 1035 label (lower-case letters,
#: digits and '-', a letter first, no '-' last), the rule the training operator's
#: PyTorchJob webhook applies (IsDNS1035Label; tests/pytorchjob_schema.py); every RFC
#: 1035 label is an RFC 1123 label too. Namespaces are RFC 1123 labels (a digit first).
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_MAX = 63
#: a TrainJob's JobSet names its Job NAME-node-0 (replicated job "node", index 0), and
#: that name is a label value too: at most 63 characters in all (JobSet's webhook)
TRAINJOB_NAME_MAX = LABEL_MAX - len("-node-0")


def check_k8s_name(value: str, flag: str, *, limit: int = LABEL_MAX) -> str:
    """``value`` if Kubernetes accepts it as ``flag`` names it, else one line saying
    why: a name with a newline, a quote, upper case or 80 characters had been written
    into the manifest, for ``kubectl apply`` to refuse later."""
    rule = _DNS1123_LABEL if flag == "--namespace" else _DNS1035_LABEL
    first = "a letter or digit" if flag == "--namespace" else "a letter"
    if len(value) > limit:
        raise ConfigError(
            f"{flag} {value!r} has {len(value)} characters; Kubernetes takes at most "
            f"{limit} here: shorten it"
        )
    if not (value.isascii() and rule.fullmatch(value)):
        raise ConfigError(
            f"{flag} {value!r} is not a name Kubernetes accepts: lower-case letters, digits "
            f"and '-' only, starting with {first} and not ending in '-' "
            f"(for example {'qwen3-runs' if flag == '--namespace' else 'qwen3-4b-run1'})"
        )
    return value


def pod_path_free(spec: RunSpec) -> RunSpec:
    """``spec`` for the checks made on the machine that writes a Kubernetes manifest:
    ``--init``, ``--corpus`` and ``--tokenizer`` name files in the pods (under /fsx),
    which this machine need not have (they had to exist here). Each must be absolute,
    as the pods see it; the checks here then plan with stand-ins (random weights of the
    preset's shape, the embedded text, the offline tokenizer), and each pod checks the
    real files when its ``qwen3-trn train`` starts."""
    from ..corpus import EMBEDDED, EMBEDDED_PRETRAIN

    paths = {
        "init": spec.init not in ("random", "pretrained"),
        "corpus": bool(spec.corpus)
        and spec.corpus not in (EMBEDDED, EMBEDDED_PRETRAIN)
        and ("/" in spec.corpus or bool(Path(spec.corpus).suffix)),
        "tokenizer": spec.tokenizer is not None,
    }
    stand_ins = {"init": "random", "corpus": EMBEDDED, "tokenizer": None}
    changes = {}
    for name, is_path in paths.items():
        value = getattr(spec, name)
        if not is_path:
            continue
        if not os.path.isabs(value):
            raise ConfigError(
                f"--{name} {value!r} names a path in the job's pods, which start elsewhere: "
                f"give it as the pods see it, absolute (for example {SHARED_DIR_K8S}/...)"
            )
        changes[name] = stand_ins[name]
    return spec.replace(**changes)


def _metadata(name: str, namespace: str | None) -> dict:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def _k8s_parts(spec: RunSpec, on_trn2: bool, image: str, efa: int | None):
    """What both Kubernetes APIs share: the checked spec, env, resources, volumes."""
    if not image or not image.strip():
        raise ConfigError("--image is empty: name the container image (registry/name:tag)")
    spec = _check(spec, **{"--image": image})
    spec = spec.replace(out=_k8s_out(spec))
    efa = EFA_INTERFACES if efa is None else efa
    if efa < 0 or efa > EFA_INTERFACES:
        raise ConfigError(f"--efa must be 0 to {EFA_INTERFACES} (a trn2.48xlarge's), got {efa}")
    env = dict(TRN2_POD_ENV) if on_trn2 else {}
    if on_trn2:
        env[NEFF_CACHE_VAR] = str(Path(spec.out).parent / "neff-cache")  # shared volume
        env[NEFF_CACHE_LOCK_TIMEOUT_VAR] = str(NEFF_CACHE_LOCK_TIMEOUT_S)
    devices: dict[str, str] = {}
    if on_trn2:
        devices["aws.amazon.com/neuron"] = str(NEURON_DEVICES)
        if efa:
            devices["vpc.amazonaws.com/efa"] = str(efa)
    amounts = {**(TRN2_POD_RESOURCES if on_trn2 else CPU_POD_RESOURCES), **devices}
    resources = {"limits": dict(amounts), "requests": dict(amounts)}  # Guaranteed QoS
    volumes = [
        # torch's data loaders and the Neuron runtime share memory through /dev/shm;
        # a container's default is 64 MiB
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "shared", "persistentVolumeClaim": {"claimName": "fsx-claim"}},
    ]
    mounts = [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "shared", "mountPath": SHARED_DIR_K8S},
    ]
    env_list = [{"name": k, "value": v} for k, v in env.items()]
    return spec, env_list, resources, volumes, mounts


def _pod_basics(on_trn2: bool, hyperpod: bool = False) -> dict:
    basics: dict = {"terminationGracePeriodSeconds": POD_GRACE_S}
    selector = {}
    if on_trn2:  # HyperPod's nodes carry the ml. name of their instance type
        kind = HYPERPOD_INSTANCE_TYPE if hyperpod else "trn2.48xlarge"
        selector["node.kubernetes.io/instance-type"] = kind
    if hyperpod:  # only nodes HyperPod's health checks passed
        selector.update(HYPERPOD_HEALTH)
    if selector:
        basics["nodeSelector"] = selector
    return basics


def hyperpod_namespace(namespace: str | None) -> str:
    """The namespace a HyperPod job runs in: ``kubeflow`` by default, or one prefixed
    ``hyperpod``; any other is one line (auto-resume does not watch it)."""
    if namespace is None:
        return HYPERPOD_NAMESPACE
    if namespace != HYPERPOD_NAMESPACE and not namespace.startswith("hyperpod"):
        raise ConfigError(
            f"--namespace {namespace!r}: HyperPod's job auto-resume runs only in the "
            f"{HYPERPOD_NAMESPACE} namespace or one prefixed hyperpod: pass --namespace "
            f"{HYPERPOD_NAMESPACE} (or hyperpod-...)"
        )
    return namespace


def _k8s_command(spec: RunSpec, python: str | None, endpoint: str) -> list[str]:
    """The container's command: ``qwen3-trn train`` with the cluster's Python (data)."""
    python = python or "python"
    _check_cluster_paths(python, "/", bare_python=True)
    train = shlex.join([python, "-m", "qwen3_trn_helpers", "train", *_train_args(spec)])
    return ["bash", "-c", f"exec {train} {endpoint}"]


def _working_dir(workdir: str | None) -> dict:
    if workdir is None:
        return {}
    _check_cluster_paths("/", workdir, bare_python=False)
    return {"workingDir": workdir}  # Kubernetes' own field: no shell reads it


def pytorchjob_manifest(
    spec: RunSpec,
    *,
    on_trn2: bool,
    image: str,
    name: str | None = None,
    efa: int | None = None,
    namespace: str | None = None,
    hyperpod: bool = False,
    python: str | None = None,
    workdir: str | None = None,
) -> dict:
    """A Kubeflow PyTorchJob (kubeflow.org/v1, HyperPod's) running ``spec`` on
    ``spec.nnodes`` pods.

    ``hyperpod``: the job SageMaker HyperPod's auto-resume takes over (AWS's "Running
    jobs using kubectl"): its two annotations (the retry count is ``--max-restarts``),
    ``OnFailure``, nodes selected by ``ml.trn2.48xlarge`` and a ``Schedulable`` health
    status, the ``kubeflow`` namespace (or one prefixed ``hyperpod``), a rendezvous
    that waits 1800 s for a replaced node; no Volcano (HyperPod schedules with the
    default scheduler, or Kueue under its task governance; a pod naming a scheduler the
    cluster lacks never runs).
    ``python`` / ``workdir``: the image's interpreter and folder, if not ``python`` on
    its PATH and its own working directory.

    The elastic form, Workers only: the training operator then sets the rendezvous
    (``PET_RDZV_ENDPOINT``, worker 0's address) and none of RANK / WORLD_SIZE, which a
    process started by torchrun would otherwise read as its own. min = max replicas:
    a fixed world, as the layout needs. ``runPolicy`` is written out (the SDK's models
    require it). Shared storage is a PersistentVolumeClaim named ``fsx-claim`` at
    ``/fsx``; ``--out`` must be under it. Restarts: a failed pod is restarted
    (``OnFailure``, what HyperPod's auto-resume needs) up to ``backoffLimit`` times and
    resumes; gang scheduling through Volcano (the operator started with
    ``--gang-scheduler-name=volcano``), all pods or none.
    """
    name = f"qwen3-trn-{spec.variant}".replace("_", "-") if name is None else name
    check_k8s_name(name, "--name")
    if namespace is not None:
        check_k8s_name(namespace, "--namespace")
    if hyperpod:
        namespace = hyperpod_namespace(namespace)
        spec = spec.replace(rdzv_timeout=max(spec.rdzv_timeout, HYPERPOD_RDZV_TIMEOUT_S))
    spec, env, resources, volumes, mounts = _k8s_parts(spec, on_trn2, image, efa)
    container = {
        "name": "pytorch",  # the operator reads the port from the container of this name
        "image": image,
        "command": _k8s_command(spec, python, '--rdzv-endpoint "$PET_RDZV_ENDPOINT"'),
        **_working_dir(workdir),
        "env": env,
        "ports": [{"name": "pytorchjob-port", "containerPort": RDZV_PORT}],
        "resources": resources,
        "volumeMounts": mounts,
    }
    pod_spec = {
        **_pod_basics(on_trn2, hyperpod),
        **({} if hyperpod else {"schedulerName": "volcano"}),
        "restartPolicy": "OnFailure",
        "containers": [container],
        "volumes": volumes,
    }
    metadata = _metadata(name, namespace)
    run_policy: dict = {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts}
    if hyperpod:
        metadata["annotations"] = {
            HYPERPOD_AUTO_RESUME: "true",
            HYPERPOD_MAX_RETRY: str(spec.max_restarts),
        }
    else:
        run_policy["schedulingPolicy"] = {"minAvailable": spec.nnodes}  # gang: all or none
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": spec.nnodes,
                "maxReplicas": spec.nnodes,
                "maxRestarts": spec.max_restarts,
            },
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": spec.nnodes,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": pod_spec},
                }
            },
        },
    }


def trainjob_manifests(
    spec: RunSpec,
    *,
    on_trn2: bool,
    image: str,
    name: str | None = None,
    efa: int | None = None,
    namespace: str | None = None,
    python: str | None = None,
    workdir: str | None = None,
) -> list[dict]:
    """A Kubeflow Trainer v2 TrainingRuntime and the TrainJob that uses it.

    The runtime (trainer.kubeflow.org/v1alpha1, namespaced) holds what the TrainJob API
    cannot say: the pod's volumes, node selector, grace time, gang scheduling
    (``podGroupPolicy.volcano``) and the JobSet's restarts (``failurePolicy.maxRestarts``:
    every pod recreated, the run resumes). The TrainJob holds the image, the command,
    the environment and the resources per node. Trainer v2 sets ``PET_MASTER_ADDR`` /
    ``PET_MASTER_PORT`` (node 0 of the JobSet): the rendezvous endpoint.
    """
    name = f"qwen3-trn-{spec.variant}".replace("_", "-") if name is None else name
    check_k8s_name(name, "--name", limit=TRAINJOB_NAME_MAX)
    if namespace is not None:
        check_k8s_name(namespace, "--namespace")
    spec, env, resources, volumes, mounts = _k8s_parts(spec, on_trn2, image, efa)
    runtime = f"{name}-runtime"
    endpoint = '--rdzv-endpoint "$PET_MASTER_ADDR:$PET_MASTER_PORT"'
    command = _k8s_command(spec, python, endpoint)
    pod_spec = {
        **_pod_basics(on_trn2),
        "restartPolicy": "Never",  # the JobSet restarts the whole job (failurePolicy)
        "containers": [
            {
                "name": "node",  # Trainer v2's trainer container
                "image": image,
                **_working_dir(workdir),
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    training_runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": _metadata(runtime, namespace),
        "spec": {
            "mlPolicy": {"numNodes": spec.nnodes, "torch": {}},
            "podGroupPolicy": {"volcano": {}},  # gang scheduling: all pods or none
            "template": {
                "spec": {
                    "failurePolicy": {"maxRestarts": spec.max_restarts},
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "replicas": 1,
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
                            },
                        }
                    ],
                }
            },
        },
    }
    train_job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _metadata(name, namespace),
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "TrainingRuntime",
                "name": runtime,
            },
            "trainer": {
                "image": image,
                "numNodes": spec.nnodes,
                "command": command,
                "env": env,
                "resourcesPerNode": resources,
            },
        },
    }
    return [training_runtime, train_job]
