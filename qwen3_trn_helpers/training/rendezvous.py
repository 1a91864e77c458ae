"""Where ranks meet: a free port, and the environment of a one-rank process group.

torchtitan initialises ``torch.distributed`` from the variables torchrun sets (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). A notebook cell or a plain
``python -m torchtitan.train`` is not launched by torchrun, so for those we provide the
variables of a one-rank group and remove them again afterwards.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

RENDEZVOUS_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def ranks_per_node() -> int:
    """This node's ranks (torchrun's LOCAL_WORLD_SIZE: ``--nproc-per-node``)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


@contextmanager
def scoped_environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration; the previous values come back."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def one_rank_environment() -> Iterator[bool]:
    """The rendezvous variables of a one-rank group, unless torchrun already set them.

    Yields whether this process was launched by torchrun.
    """
    if launched_by_torchrun():
        yield True
        return
    one_rank = dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    with scoped_environ(**one_rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())):
        yield False


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) resolves to a loopback address."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False  # unresolvable here: torchrun reports it with the host's name
    return any(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def slurm_node_addresses(nodelist: str) -> list[str] | None:
    """Each node's NodeAddr in a Slurm node list: what slurmctld itself reaches it by."""
    import subprocess

    def scontrol(*args: str) -> str:
        return subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout

    try:
        addresses = []
        for name in scontrol("show", "hostnames", nodelist).split():
            shown = scontrol("show", "node", "-o", name).split()
            fields = dict(kv.split("=", 1) for kv in shown if "=" in kv)
            addresses.append(fields.get("NodeAddr", name))
    except (OSError, subprocess.SubprocessError):
        return None
    return addresses


def nodes_are_separate_hosts(environ: dict[str, str] | None = None) -> bool:
    """Whether the scheduler running this job put its nodes on different machines.

    Kubernetes: always (every pod has its own network namespace, so no two share a
    loopback). Slurm: when any allocated node's NodeAddr is not a loopback address.
    Plain torchrun: unknown, so False (two agents on one machine may meet at
    127.0.0.1; that is how this package tests several nodes on one machine).
    """
    env = os.environ if environ is None else environ
    if "KUBERNETES_SERVICE_HOST" in env:
        return True
    nodelist = env.get("SLURM_JOB_NODELIST")
    addresses = slurm_node_addresses(nodelist) if nodelist else None
    return bool(addresses) and not all(_is_loopback(a) for a in addresses)


def check_endpoint_reachable_by_all(endpoint: str, environ: dict[str, str] | None = None) -> None:
    """Refuse a loopback endpoint for a job whose nodes are different hosts.

    Each node's torchrun hosts the rendezvous itself when the endpoint names its own
    machine, and a loopback address names every machine: each node would wait alone
    at its own loopback until the timeout.
    """
    from ..errors import ConfigError
    from .spec import split_endpoint

    host, port = split_endpoint(endpoint)
    if not _is_loopback(host) or not nodes_are_separate_hosts(environ):
        return
    raise ConfigError(
        f"rdzv_endpoint {endpoint} is a loopback address, but this job's nodes are "
        "different hosts: each would wait alone at its own loopback. Pass the first "
        "node's network address, e.g. --rdzv-endpoint $(getent ahostsv4 HEAD | awk "
        f"'NR==1{{print $1}}'):{port} (Slurm: HEAD is the first name of "
        "`scontrol show hostnames $SLURM_JOB_NODELIST`)"
    )


def nodes_joined(endpoint: str, run_id: str = "none") -> int | None:
    """How many nodes have joined torchrun's c10d rendezvous at ``endpoint`` so far.

    None when nothing answers there (the first node's torchrun, which hosts the
    rendezvous store, has not started or cannot be reached). Read from the store as
    torchrun itself reads it (``C10dRendezvousBackend.get_state``); the state object
    is torch's own, unpickled only to count its participants.
    """
    import pickle
    from datetime import timedelta

    from .spec import split_endpoint

    host, port = split_endpoint(endpoint)
    try:  # a plain probe first: a TCPStore client that cannot connect logs pages of C++
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return None
    try:
        from torch.distributed import TCPStore
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
            C10dRendezvousBackend,
        )

        store = TCPStore(host, port, is_master=False, timeout=timedelta(seconds=2),
                         wait_for_workers=False)  # fmt: skip
        state = C10dRendezvousBackend(store, run_id).get_state()
        if state is None:
            return 0
        return len(pickle.loads(state[0]).participants)
    except Exception:  # the store went away between the probe and the read
        return None


#: the distributions whose versions must agree on every rank of a job
SAME_EVERYWHERE = ("torch", "torchtitan", "torch-neuronx", "transformers", "qwen3-trn")


def local_versions() -> dict[str, str | None]:
    """This process's versions of :data:`SAME_EVERYWHERE` (None: not installed)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in SAME_EVERYWHERE:
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


def check_same_versions() -> None:
    """Stop every rank with one line if the job's nodes run different software.

    Called once the process group exists. Gathered over a gloo group (CPU tensors,
    whatever the device backend), one report per rank, so every rank raises the same
    error. A version skew otherwise shows up much later as a hang or a wrong number.
    """
    import torch.distributed as dist

    from ..errors import ConfigError

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    mine = {
        "node": os.environ.get("GROUP_RANK", "0"),
        "host": socket.gethostname(),
        "versions": local_versions(),
    }
    group = dist.new_group(backend="gloo")
    try:
        reports: list = [None] * dist.get_world_size()
        dist.all_gather_object(reports, mine, group=group)
    finally:
        dist.destroy_process_group(group)
    problem = version_mismatch(reports)
    if problem:
        raise ConfigError(problem)
