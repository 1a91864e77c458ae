"""How the nodes of one job meet: torchrun's c10d rendezvous, seen from outside it.

Before a multi-node launch we refuse an endpoint the nodes cannot share (a loopback
address when the scheduler put them on different hosts); while the nodes gather, we
read torchrun's own rendezvous state to say how many came.
"""

from __future__ import annotations

import io
import os
import pickle
import socket

from ..training.spec import split_endpoint


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
    from datetime import timedelta

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
        return len(_RendezvousStateOnly(io.BytesIO(state[0])).load().participants)
    except Exception:  # the store went away between the probe and the read, or another
        return None  # service answers at that port


class _RendezvousStateOnly(pickle.Unpickler):
    """Unpickles torch's rendezvous state and nothing else: the bytes come from whatever
    answers at the endpoint, and a plain ``pickle.loads`` would run any code they name."""

    ALLOWED = {
        ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_RendezvousState"),
        ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_NodeDesc"),
        ("datetime", "datetime"),
        ("datetime", "timedelta"),
        ("builtins", "set"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a rendezvous state")
        return super().find_class(module, name)


#: polls :func:`nodes_joined` in a child process (see :class:`JoinWatch`)
_WATCH = """
import os, sys, threading, time
parent = os.getppid()

def orphaned():  # the launcher gone (even while a read below hangs): go too
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)

threading.Thread(target=orphaned, daemon=True).start()
import socket
import torch.distributed  # before the first read: its import is not a slow answer
from qwen3_trn_helpers.runs.rendezvous import nodes_joined
from qwen3_trn_helpers.training.spec import split_endpoint
while True:
    try:
        socket.create_connection(split_endpoint(sys.argv[1]), timeout=1).close()
    except OSError:
        print("none", flush=True)  # nothing listens there (yet)
    else:
        print("connect", flush=True)  # something listens: is it torchrun's store?
        joined = nodes_joined(sys.argv[1])
        print(-1 if joined is None else joined, flush=True)
    time.sleep(1)
"""


class JoinWatch:
    """How many nodes have joined so far (``joined``), read every second by a child.

    Why a child: a TCPStore client talking to something that is not torchrun's store
    (an HTTP server, a proxy) can block for minutes and prints pages of C++ frames to
    stderr; in a child with its stderr discarded, neither reaches the launch, which ends
    as soon as torchrun does.
    """

    def __init__(self, endpoint: str) -> None:
        import subprocess
        import sys
        import threading

        self.joined: int | None = None
        self._store_seen, self._failed_reads = False, 0
        self._asking_since: float | None = None
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _WATCH, endpoint], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import time

        for line in self._proc.stdout or ():
            word = line.strip()
            if word == "connect":
                self._asking_since = self._asking_since or time.monotonic()
                continue
            if word.lstrip("-").isdigit():
                self._asking_since = None
                count = int(word)
                self._store_seen |= count >= 0
                self._failed_reads += count < 0
                if count > 0:
                    self.joined = count

    @property
    def another_service(self) -> bool:
        """Whether something other than torchrun's store answers at the endpoint: it
        accepts connections, but no read of a rendezvous state ever succeeded (three
        failed, or one has hung for over 5 s; torchrun's store answers at once)."""
        import time

        hung = self._asking_since is not None and time.monotonic() - self._asking_since > 5
        return (self._failed_reads >= 3 or hung) and not self._store_seen

    def close(self) -> None:
        """Stop polling (at the first step, and at the end; again is harmless)."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
