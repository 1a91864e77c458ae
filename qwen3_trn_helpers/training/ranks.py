"""Where this process stands in its job: rank, world size, ranks per node, versions.

torchtitan initialises ``torch.distributed`` from the variables torchrun sets (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). A notebook cell or a plain
``python -m torchtitan.train`` is not launched by torchrun, so for those we provide the
variables of a one-rank group and remove them again afterwards. Once the group exists,
every rank checks that the job runs one set of software.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from unittest.mock import patch


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class RankPlace:
    """This process's place in its job, as torchrun's variables give it (a process
    torchrun did not start: rank 0 of one, on node 0 of one)."""

    launched: bool  # torchrun started this process (RANK and WORLD_SIZE are set)
    rank: int  # RANK
    local_rank: int  # LOCAL_RANK: this rank's index on its node
    world_size: int  # WORLD_SIZE
    local_world_size: int  # LOCAL_WORLD_SIZE (torchrun's --nproc-per-node)
    node: int  # GROUP_RANK: the node's index in the job
    nodes: int  # GROUP_WORLD_SIZE

    @property
    def torchrun_world(self) -> tuple[int, int] | None:
        """(ranks per node, nodes) as torchrun told this process; None if it did not."""
        if not self.launched:
            return None
        return self.local_world_size, max(self.world_size // self.local_world_size, 1)


def rank_place(environ: Mapping[str, str] | None = None) -> RankPlace:
    """The one reader of torchrun's rank variables (``environ``: default this process's).

    Read afresh at each call: a run in this process sets a one-rank group's variables
    for its duration only (:func:`one_rank_environment`)."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    return RankPlace(
        launched="RANK" in env and "WORLD_SIZE" in env,
        rank=int(env.get("RANK", "0")),
        local_rank=int(env.get("LOCAL_RANK", "0")),
        world_size=world,
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
        node=int(env.get("GROUP_RANK", "0")),
        nodes=int(env.get("GROUP_WORLD_SIZE", "1")),
    )


def launched_by_torchrun() -> bool:
    return rank_place().launched


def rank() -> int:
    return rank_place().rank


def world_size() -> int:
    return rank_place().world_size


def ranks_per_node() -> int:
    """This node's ranks (torchrun's LOCAL_WORLD_SIZE: ``--nproc-per-node``)."""
    return rank_place().local_world_size


@contextmanager
def one_rank_environment() -> Iterator[bool]:
    """The rendezvous variables of a one-rank group, unless torchrun already set them.

    Yields whether this process was launched by torchrun.
    """
    if launched_by_torchrun():
        yield True
        return
    one_rank = dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    with patch.dict(os.environ, **one_rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())):
        yield False


#: the distributions whose versions must agree on every rank of a job
SAME_EVERYWHERE = ("torch", "torchtitan", "torch-neuronx", "transformers", "qwen3-trn")


def local_versions(names: tuple[str, ...] = SAME_EVERYWHERE) -> dict[str, str | None]:
    """This process's versions of ``names`` (default :data:`SAME_EVERYWHERE`; None: not
    installed)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def version_mismatch(reports: list[dict]) -> str | None:
    """The first difference between ranks' ``{"node", "host", "versions"}`` reports."""
    first = reports[0]
    for other in reports[1:]:
        for name, version in first["versions"].items():
            theirs = other["versions"].get(name)
            if theirs != version:
                return (
                    f"{name} differs between nodes: {theirs or 'not installed'} on node "
                    f"{other['node']} ({other['host']}), {version or 'not installed'} on node "
                    f"{first['node']} ({first['host']}); install the same versions on every "
                    "node (one shared venv, or one container image)"
                )
    return None


def settings_mismatch(reports: list[dict]) -> str | None:
    """The first run setting that differs between ranks' reports (their ``settings``:
    each node's resolved run settings, named as the user knows them)."""
    first = reports[0]
    mine = first.get("settings") or {}
    for other in reports[1:]:
        theirs = other.get("settings") or {}
        for name in [*mine, *(k for k in theirs if k not in mine)]:
            if mine.get(name) != theirs.get(name):
                return (
                    f"the nodes were started with different run settings: {name} is "
                    f"{theirs.get(name)!r} on node {other['node']} ({other['host']}) and "
                    f"{mine.get(name)!r} on node {first['node']} ({first['host']}); start "
                    "the same command on every node"
                )
    return None


def check_same_versions(settings: dict | None = None) -> None:
    """Stop every rank with one line if the job's nodes run different software, or were
    started with different run settings (``settings``: this rank's, resolved).

    Called once the process group exists. Gathered over a gloo group (CPU tensors,
    whatever the device backend), one report per rank, so every rank raises the same
    error. A version skew otherwise shows up much later as a hang or a wrong number;
    another --seq-len on one node trained silently, another --variant hung for minutes.
    """
    import torch.distributed as dist

    from ..errors import ConfigError

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    mine = {
        "node": str(rank_place().node),
        "host": socket.gethostname(),
        "versions": local_versions(),
        "settings": settings or {},
    }
    group = dist.new_group(backend="gloo")
    try:
        reports: list = [None] * dist.get_world_size()
        dist.all_gather_object(reports, mine, group=group)
    finally:
        dist.destroy_process_group(group)
    JOB_NODES[:] = [(str(r["node"]), str(r["host"])) for r in reports]
    problem = version_mismatch(reports) or settings_mismatch(reports)
    if problem:
        raise ConfigError(problem)


#: (node rank, host name) of each rank of this job, as the ranks reported them at start
#: (:func:`check_same_versions`): to name the node a lost peer ran on
JOB_NODES: list[tuple[str, str]] = []

#: the peer address in gloo's lost-connection errors ("Connection closed by peer
#: [10.0.0.2]:35456", "Read error [10.0.0.2]:57121: Connection reset by peer")
_PEER = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")


def lost_node(error_text: str) -> str | None:
    """The node a lost peer ran on, named (``node 1 (trn2-b) at 10.0.0.2``), from the
    collective's error and the job's nodes; the bare address where no node matches, None
    where the error names none and the job's other node is not the only candidate."""
    found = _PEER.search(error_text)
    address = found.group(1) if found else None
    me = str(rank_place().node)
    others = sorted({n for n in JOB_NODES if n[0] != me})
    if address is not None:
        matches = [n for n in others if address in _addresses(n[1])]
        if len(matches) == 1 or (len(others) == 1 and not matches):
            node, host = (matches or others)[0]
            return f"node {node} ({host}) at {address}"
        return f"the node at {address}"
    if len(others) == 1:
        return f"node {others[0][0]} ({others[0][1]})"
    return None


def _addresses(host: str) -> set[str]:
    """Every address ``host`` resolves to here (none if it does not resolve)."""
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return set()


def end_process_groups(*, barrier: bool = True) -> None:
    """Shut this rank's collectives down in order: every rank done (``barrier``: only
    where every rank reaches this point, as a rank that failed alone would wait out the
    timeout), then every process group destroyed (torch shuts each backend down)."""
    import gc

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if barrier:
        dist.barrier()
    dist.destroy_process_group()
    gc.collect()


def leave(code: int) -> NoReturn:
    """End a process that ran collectives, once they are shut down: its output flushed,
    then out at once (``os._exit``), with no interpreter shutdown.

    Why: after an FSDP2 step (torch 2.14, gloo) the group's three C++ threads (two
    ``pt_gloo_runloop``, one ``gloo_tcp_loop``) still run after ``destroy_process_group()``
    and ``gc.collect()``: something outside Python's reach (the DeviceMesh ``fully_shard``
    made, DTensor's caches) keeps the C++ group alive. Interpreter shutdown then frees
    it in whatever order it frees modules, and a joinable ``std::thread`` destroyed there
    aborts the process ("terminate called without an active exception", SIGABRT, exit
    -6) after its work passed: a two-node Slurm job's fabric check failed so. Leaving
    with ``os._exit`` runs no destructor at all; the kernel ends the threads.
    """
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # (a closed or broken pipe: nothing more to say there)
    os._exit(code)


def collective_threads() -> list[str]:
    """The names of this process's threads that belong to a gloo process group (Linux;
    empty elsewhere): what must not be running when the process shuts down."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return []
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            continue  # (a thread that ended meanwhile)
    return sorted(n for n in names if "gloo" in n)
