"""The Slurm batch script: one ``srun`` task per node, each starting the same
``qwen3-trn train`` command (torchrun with its c10d rendezvous, runs/torchrun.py). The
script is printed for the user to read, edit and submit (``qwen3-trn slurm ... >
job.sbatch; sbatch job.sbatch``); none is a launcher of ours.

Jobs survive: the script runs ``--resume auto`` with a checkpoint interval it states, so
the first run, a requeued one and torchrun's restarted ranks are the same command;
SIGTERM (preemption, ``scontrol requeue``) saves the current step first if it can
(training/stopping.py), and the job is warned of its time limit early enough to save a
checkpoint of its model's size, then requeues. Every user value is written as data:
control characters are refused, the rest is quoted for bash (``shlex.quote``) and no
user value reaches an ``#SBATCH`` line. Before training, the fabric check (ops/fabric.py)
measures every node. The Neuron and EFA settings every trn2 node needs come from AWS's
multi-node docs, named where they are set (common.py). Cheap to import: text only.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ...training.compile import NEFF_CACHE_LOCK_TIMEOUT_S, NEFF_CACHE_LOCK_TIMEOUT_VAR
from ...training.spec import RunSpec
from .common import (
    NEFF_CACHE_VAR,
    NOFILE,
    RDZV_PORT,
    TRN2_NODE_ENV,
    _check,
    _check_cluster_paths,
    _local_paths,
    _train_args,
)
from .saves import Saves, Storage

#: what SageMaker HyperPod's Slurm clusters have and others do not: AWS's samples enable
#: ``srun --auto-resume=1`` (HyperPod's Slurm plugin; "Automatic node recovery and
#: auto-resume", SageMaker developer guide) where this folder exists
HYPERPOD_MARKER = "/opt/sagemaker_cluster"

#: every trn2 node's setup before the job's steps, as neuronx-distributed-training's
#: examples/train_setup.sh does it on Slurm: FSx for Lustre's client caps the dirty
#: cache each connection reserves ("so we avoid OODs", its comment), and the job's port
#: is reserved so that no outgoing connection takes it as its source port (it reserves
#: its MASTER_PORT, 41000). Guarded: a node without lctl (no Lustre client there, or a
#: container without the host's tools: the script runs this step on the host) or without
#: sudo rights says so in one warning and goes on; the reservation is added to the
#: node's list, never replacing it. $1: the job's port.
NODE_SETUP = (
    "port=$1; node=$(hostname); "
    "if command -v lctl >/dev/null 2>&1; then "
    "sudo -n lctl set_param 'osc.*.max_dirty_mb=64' >/dev/null 2>&1 || "
    'echo "warning: node $node: lctl set_param osc.*.max_dirty_mb=64 refused (no sudo '
    'rights?); FSx keeps its default" >&2; '
    'else echo "warning: node $node: no lctl here (not a Lustre client, or inside a '
    'container): FSx keeps its default max_dirty_mb" >&2; fi; '
    "reserved=$(sysctl -n net.ipv4.ip_local_reserved_ports 2>/dev/null || true); "
    'case ",$reserved," in *",$port,"*) ;; *) '
    'sudo -n sysctl -w "net.ipv4.ip_local_reserved_ports=${reserved:+$reserved,}$port" '
    '>/dev/null 2>&1 || echo "warning: node $node: port $port not reserved '
    '(net.ipv4.ip_local_reserved_ports needs sudo rights)" >&2;; esac; true'
)


def slurm_script(
    spec: RunSpec,
    *,
    on_trn2: bool,
    python: str | None = None,
    workdir: str | None = None,
    container_image: str | None = None,
    fabric_floor: float | None = None,
    saves: Saves | None = None,
) -> str:
    """An sbatch script that runs ``spec`` on ``spec.nnodes`` nodes and survives.

    ``workdir`` is the folder every step runs in: where the repository is checked out
    on the cluster (shared storage every node mounts); by default the folder this runs
    in, which is right when the script is generated on the cluster itself. ``python``:
    the cluster's interpreter (its venv), by default this one. Both are written as data.
    ``fabric_floor``: the fabric check's floor in GB/s of bus bandwidth per node
    (ops/fabric.py; by default a share of trn2's EFA on trn2, none on a CPU).
    ``saves``: how the job's saves were sized (ops/jobs/saves.py), said in its header;
    the time-limit warning then comes as early as a save at that storage's rate needs.

    The first allocated node hosts the rendezvous. Its address is the one slurmctld
    reaches it by (NodeAddr), resolved to an IPv4 address on the node itself; never
    ``hostname --ip-address``, which gives 127.0.1.1 on images whose /etc/hosts maps
    the host name there (and ``qwen3-trn train`` refuses a loopback endpoint when the
    job's nodes are different hosts). ``sbatch`` works from any folder: the log goes
    where sbatch runs (Slurm creates no folder), the script makes ``--out`` and checks,
    on every node, each path it needs.
    """
    from .container import CONTAINER_PYTHON, pyxis_lines

    # (in a container: the image's Python, ops/jobs/container.py)
    python = python or (CONTAINER_PYTHON if container_image else sys.executable)
    workdir = workdir or os.getcwd()
    _check_cluster_paths(python, workdir, bare_python=False)
    spec = _check(spec, python=python, **{"the working folder": workdir})
    spec = spec.replace(out=os.path.normpath(os.path.join(workdir, spec.out)))
    name = f"qwen3-trn-{spec.variant}".replace("_", "-")
    q = shlex.quote
    warning = time_limit_warning(spec, on_trn2, saves.storage if saves else None)
    sizing = [f"# {line}" for line in saves.describe()] if saves else []
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
        *sizing,
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
            "# lctl or sudo rights warns and goes on"
            + (
                "; on the host, not in the container (command srun:\n# without Pyxis' "
                "image), where lctl and the node's sysctl are"
                if container_image is not None
                else ""
            ),
            f"{'command srun' if container_image is not None else 'srun'} "
            f'--ntasks-per-node=1 bash -c {q(NODE_SETUP)} setup "$port"',
        ]
    lines += [
        "",
        "# the fabric check's logs beside the run folder, on the shared storage every",
        "# node (and, under Pyxis, every container) mounts",
        'fabric_out="$out-fabric-$SLURM_JOB_ID"',
        'cd -- "$workdir"',
    ]
    lines += _fabric_lines(spec, on_trn2, container_image is None, fabric_floor)
    cmd = ["-m", "qwen3_trn_helpers", "train", *_train_args(spec, leave_out=("out",))]
    lines += [
        "",
        "# SageMaker HyperPod: where the cluster has it, its auto-resume reruns this step",
        "# on a replaced node after a hardware fault (the run resumes: --resume auto), as",
        "# AWS's torchtitan sbatch does (awsome-distributed-training, 3.test_cases/",
        "# pytorch/torchtitan/slurm); a plain Slurm has no such srun flag",
        f"hyperpod_marker={HYPERPOD_MARKER}",
        'auto_resume=""',
        'if [ -d "$hyperpod_marker" ]; then',
        '  auto_resume="--auto-resume=1"; echo "HyperPod cluster: srun --auto-resume=1"',
        "fi",
        "# one task per node; a failing node stops the others (--kill-on-bad-exit), and",
        "# scancel's SIGTERM reaches every rank through qwen3-trn and torchrun",
        'srun ${auto_resume:+"$auto_resume"} --kill-on-bad-exit=1 --ntasks-per-node=1 \\',
        '  "$python" \\',
        f"  {shlex.join(cmd)} \\",
        '  --out "$out" --rdzv-endpoint "$head_ip:$port" &',
        "srun_pid=$! attempt_start=$(date +%s)",
        "# wait again after the USR1 trap interrupts wait; the job's status is srun's",
        'status=0; wait "$srun_pid" || status=$?',
        'while kill -0 "$srun_pid" 2>/dev/null; do status=0; wait "$srun_pid" || status=$?; done',
        "# warned of the time limit: every rank has saved its step and left; go again",
        'if [ -n "$time_limit_near" ]; then',
        '  kill "$backstop" 2>/dev/null || true',
        '  echo "requeueing: the run saved its step before the time limit"',
        '  scontrol requeue "$SLURM_JOB_ID" || true  # (|| true: the backstop was first)',
        "fi",
        *_hang_requeue_lines(spec),
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)


#: a job the watchdog stopped is requeued this many times at most (a step that hangs
#: every time is a bug to look at, not to retry)
HANG_REQUEUES = 3


def _hang_requeue_lines(spec: RunSpec) -> list[str]:
    """Requeue an attempt the watchdog stopped (training/watchdog.py: a step outlasted
    --hang-timeout; every rank's stack is in $out/ranks, its record written there)."""
    if not spec.hang_timeout:
        return []
    return [
        f"# a step outlasted --hang-timeout ({spec.hang_timeout} s): the watchdog saved each",
        "# rank's stack in $out/ranks and stopped the run; go again from the last checkpoint",
        'hung="$out/ranks/watchdog.json"',
        'if [ -z "$time_limit_near" ] && [ -e "$hung" ] && '
        '[ "$(stat -c %Y "$hung")" -ge "$attempt_start" ] && '
        f'[ "${{SLURM_RESTART_COUNT:-0}}" -lt {HANG_REQUEUES} ]; then',
        '  echo "requeueing: the watchdog stopped a hung step (stacks: $out/ranks)"',
        '  scontrol requeue "$SLURM_JOB_ID" || true',
        "fi",
    ]


# Slurm signals the batch script ahead of the time limit (--signal=B:USR1@LEAD): the
# trap asks every rank to save its step and stop, then requeues the job. LEAD comes
# from the checkpoint's size (training/stopping.py signal_lead_s, at least 300 s)
@dataclass(frozen=True)
class TimeLimitWarning:
    """How early a Slurm job is warned of its time limit, and why: the save of the
    model's checkpoint at an assumed write throughput, with margins
    (training/stopping.py signal_lead_s)."""

    checkpoint_bytes: int
    write_mb_s: float
    lead_s: int
    write_source: str = "AWS's sample FSx for Lustre: 1.2 TiB at 250 MB/s/TiB"

    def trap_lines(self) -> list[str]:
        """The batch script's USR1 trap: ask every rank to save and stop (the run
        folder's stop file, which rank 0 reads at each step's end), requeue once srun
        returns; and should the save outlast the warning, requeue a minute before the
        limit anyway (a job the limit ends is not requeued)."""
        from ...training.stopping import STOP_FILE, save_seconds

        save_s = save_seconds(self.checkpoint_bytes, self.write_mb_s)
        backstop = max(self.lead_s - 60, 1)
        return [
            f"# the time limit is near (USR1, {self.lead_s} s ahead: the checkpoint is "
            f"~{self.checkpoint_bytes / 1e9:.3g} GB, ~{save_s:.0f} s",
            f"# to write at {self.write_mb_s:.0f} MB/s, {self.write_source};",
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


def time_limit_warning(
    spec: RunSpec, on_trn2: bool, storage: Storage | None = None
) -> TimeLimitWarning:
    """The warning ``spec``'s job needs: its model's checkpoint size, planned as the
    job will run (the preset a trn2 job resolves to), at ``storage``'s write rate (the
    job's sized saves: ops/jobs/saves.py), else the sample FSx throughput."""
    from ...device import DEVICES, as_device
    from ...training.plan import plan_run
    from ...training.stopping import FSX_SAMPLE_WRITE_MB_S, checkpoint_bytes, signal_lead_s

    # a device named is the nodes'; "auto" is what the job's nodes are (on_trn2)
    named = spec.device in DEVICES
    device = as_device(spec.device) if named else DEVICES["neuron" if on_trn2 else "cpu"]
    nbytes = checkpoint_bytes(plan_run(spec, device_type=device).shape.parameter_count())
    if storage is None:
        return TimeLimitWarning(nbytes, FSX_SAMPLE_WRITE_MB_S, signal_lead_s(nbytes))
    rate = storage.write_mb_s
    return TimeLimitWarning(nbytes, rate, signal_lead_s(nbytes, rate), storage.write_source)


def _fabric_lines(spec: RunSpec, on_trn2: bool, on_host: bool, floor: float | None) -> list[str]:
    """The fabric check before training (ops/fabric.py): every rank of every node, an
    all-reduce that measures each node's bus bandwidth, a node below the floor fails the
    job. Its port is the job's own rendezvous port: the check's torchrun has ended on
    every node before the training's starts (srun returns when every task has), and its
    store listens with SO_REUSEADDR, so the port is free again; a second port
    (``port + 2`` before) was one more to collide with another job's on the same host.
    ``on_host``: the steps run on the nodes themselves, not in a container, so trn2's
    nodes may have Neuron's nccom-test, which then measures instead (ops/fabric.py)."""
    from ..fabric import FLOOR_FRACTION, NEURON_BYTES

    floor_flag = [] if floor is None else ["--fabric-floor", f"{floor:g}"]
    where = (
        f"floor {floor:g} GB/s (--fabric-floor)"
        if floor is not None
        else f"floor {FLOOR_FRACTION:.0%} of each node's own EFA (its instance type's)"
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
        "# Neuron's own collectives benchmark where it is installed: first every node's",
        "# EFA devices against its instance type's (a node with some down fails here,",
        "# by name), then nccom-test over every node at once through srun (its",
        "# --slurm-mode, on this job's allocation: no MPI or ssh); below the floor, the",
        "# per-node check (the package's own, below) names the node, and the job stops",
        "if command -v nccom-test >/dev/null 2>&1; then",
        '  srun --ntasks-per-node=1 --kill-on-bad-exit=1 "$python" \\',
        "    -m qwen3_trn_helpers.ops.fabric efa",
        f'  if ! "$python" -m qwen3_trn_helpers.ops.fabric nccom --nproc {spec.nproc} '
        f"--nnodes {spec.nnodes} \\",
        f"      --bytes {NEURON_BYTES} {''.join(f'{a} ' for a in nccom_floor)}"
        '--job-id "$SLURM_JOB_ID"; then',
        *("    " + line for line in smoke),
        "    exit 1",
        "  fi",
        "else",
        *("  " + line for line in smoke),
        "fi",
    ]
