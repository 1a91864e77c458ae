"""The one place a torchrun command line and its ranks' environment are built.

Three callers launch ranks through torchrun (PyTorch's own launcher, ``python -m
torch.distributed.run``): ``train`` (runs/torchrun.py, one rank per device, on one node
or several), the smoke ladder's raw torchrun rungs (smoke/, the collectives across
nodes too) and AWS's fork side by side (lessons/aws_stack.py). They differ only in what
each rank runs, how many ranks, where the nodes meet and a few environment choices;
:func:`torchrun` and :func:`child_environment` take those as parameters, so how the
nodes meet and what a Neuron rank needs are written once.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

from ..training.plan import Plan
from .neuron_cores import (
    neuron_rank_environment,
    one_process_share_environment,
    share_torchrun_prefix,
)

#: what torchrun itself decides for each rank (how many ranks per node and nodes, where
#: they meet): a rank's argv leaves them out and its plan reads them back from torchrun
LAUNCH_FIELDS = ("nproc", "nnodes", "rdzv_endpoint", "rdzv_timeout", "max_restarts")

#: torchrun (torch 2.14's c10d rendezvous) keeps one TCPStore server for every restart round
#: and its ranks use it unprefixed, so ranks a restart starts find the keys the process
#: groups of the round before left there: a restarted gloo rank reads a dead rank's
#: address and fails ("Gloo connectFullMesh ... Connection refused"), unless its peer
#: happened to write its new one first. torch's own opt-out of that sharing makes rank 0
#: start a new store, on a new port, each round (tests/e2e/test_multinode.py: still needed).
FRESH_STORE_EACH_ROUND = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}

shell_command = shlex.join  # the command as one line a shell runs as it is


def torchrun(
    entry: Sequence[str],
    *,
    nproc: int,
    python: str | None = None,
    nnodes: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_timeout: int | None = None,
    max_restarts: int = 0,
    in_share: bool = False,
) -> list[str]:
    """``python -m torch.distributed.run`` starting ``nproc`` ranks on this node, each
    running ``entry`` (``["-m", module, *args]``).

    One node: torchrun's ``--standalone`` (``nnodes`` 1 names the count, None leaves
    torchrun's default). Several: its c10d rendezvous at ``rdzv_endpoint``, the same
    command on every node, which torchrun numbers as they join; a node waits
    ``rdzv_timeout`` seconds for the others. ``in_share``: ranks that are not ``qwen3-trn
    train`` (which confines itself) start inside a class's share of a trn2, if any
    (:func:`~.neuron_cores.share_torchrun_prefix`).
    """
    if nnodes is not None and nnodes > 1:  # (the callers refuse a job without its endpoint)
        where = [
            f"--nnodes={nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}",
            f"--rdzv-conf=join_timeout={rdzv_timeout}",
        ]
    else:
        where = ["--standalone"] + ([f"--nnodes={nnodes}"] if nnodes is not None else [])
    if max_restarts:
        where.append(f"--max-restarts={max_restarts}")
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        f"--nproc-per-node={nproc}",
        *(share_torchrun_prefix(nproc) if in_share else []),
        *entry,
    ]


def torchrun_command(plan: Plan, python: str | None = None, **rank_fields: str) -> list[str]:
    """The exact command of a training launch: torchrun for this node, every rank
    running ``qwen3-trn train`` with the plan's spec.

    The rank counts are torchrun's: each rank's plan reads them back from WORLD_SIZE and
    LOCAL_WORLD_SIZE, so the ranks' argv leaves them out (:data:`LAUNCH_FIELDS`; passing
    ``--nproc`` on would not even parse: torchrun's argparse takes it for an
    abbreviation of its own ``--nproc-per-node``). ``rank_fields`` are flags the ranks
    get on top of the spec's own (the run folder this launch settled, the published
    weights' folder).
    """
    spec = plan.spec
    argv = spec.to_argv(leave_out=LAUNCH_FIELDS + tuple(rank_fields))
    for name, value in rank_fields.items():
        argv += ["--" + name.replace("_", "-")] + ([] if value == "" else [value])
    return torchrun(
        ["-m", "qwen3_trn_helpers", "train", "--no-progress", *argv],
        nproc=plan.nproc,
        python=python,
        nnodes=plan.nnodes,
        rdzv_endpoint=spec.rdzv_endpoint,
        rdzv_timeout=spec.rdzv_timeout,
        max_restarts=spec.max_restarts,
    )


def child_environment(
    *,
    neuron: bool,
    threads: int | None = None,
    neuron_cores: str | None = None,
    fresh_store: bool = False,
    offline: bool = False,
    one_process: bool = False,
) -> dict[str, str]:
    """The environment a launched child (torchrun and its ranks, or one process) gets:
    this one, plus what its caller chose and what the device needs.

    ``threads``: OMP_NUM_THREADS unless set (ranks sharing a machine's cores must not each
    start a full thread pool). ``fresh_store``: a fresh rendezvous store each restart
    round (:data:`FRESH_STORE_EACH_ROUND`). ``offline``: HF_HUB_OFFLINE unless set.
    On trn2 (``neuron``) the Neuron runtime's settings
    (:func:`~.neuron_cores.neuron_rank_environment`; ``neuron_cores``: the slice the ranks
    confine themselves to), and for ``one_process`` the first core of a class's share only.
    """
    env = dict(os.environ)
    if fresh_store:
        env.update(FRESH_STORE_EACH_ROUND)
    if threads is not None:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    if offline:
        env.setdefault("HF_HUB_OFFLINE", "1")
    if neuron:
        env = neuron_rank_environment(env, neuron_cores)
        if one_process:
            env = one_process_share_environment(env)
    return env


def rank_environment(plan: Plan, neuron_cores: str | None = None) -> dict[str, str]:
    """The environment a training launch's torchrun and every rank get: a fresh store
    each restart round (one node's restarts too); CPU ranks share the machine's cores
    evenly; on trn2, the Neuron settings (``neuron_cores``: the class's slice)."""
    cpu, neuron = plan.device.is_cpu, plan.device.is_trn2
    threads = max(1, (os.cpu_count() or 1) // plan.nproc) if cpu else None
    return child_environment(
        neuron=neuron, threads=threads, neuron_cores=neuron_cores, fresh_store=True
    )
