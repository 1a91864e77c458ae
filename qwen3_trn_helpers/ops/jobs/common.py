"""What every job file shares, whichever scheduler runs it: the environment each trn2
node needs, the job's defaults (checkpoint interval, restarts, port), and the checks a
spec passes before it is written into a job (several nodes, shared --out, --resume
auto, no control characters in any value). Text only."""

from __future__ import annotations

import os
from dataclasses import asdict

from ...errors import ConfigError
from ...training.spec import RESUME_AUTO, RunSpec

#: every node's environment on trn2. EFA: AWS's torch-neuronx multi-node setup guide
#: (setup-trn1-multi-node-execution); MALLOC_ARENA_MAX: neuronx-distributed-training's
#: examples/train_setup.sh (128)
TRN2_NODE_ENV = {
    "FI_PROVIDER": "efa",  # libfabric over the instance's EFA interfaces, not TCP
    "FI_EFA_USE_DEVICE_RDMA": "1",  # the chips write to EFA directly (RDMA)
    "FI_EFA_FORK_SAFE": "1",  # needed on Amazon Linux 2; harmless elsewhere
    "MALLOC_ARENA_MAX": "128",  # 64 rank processes per node: bound glibc's arenas
}
#: open files per process, as neuronx-distributed-training's train_setup.sh raises it
NOFILE = 65535
#: TorchNeuron's persistent NEFF cache folder (torch-neuronx source; default /tmp/neff_cache)
NEFF_CACHE_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
RDZV_PORT = 29500  # torchrun's customary port (MASTER_PORT's default)
#: job files save a checkpoint every this many steps unless --checkpoint-interval says
#: otherwise: about 5-10 minutes of a 4B trn2 step, so a preemption loses little and
#: FSx is not written all the time
JOB_CHECKPOINT_INTERVAL = 100
#: torchrun restarts a node's ranks this many times unless --max-restarts says otherwise
JOB_MAX_RESTARTS = 3


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
