"""How the nodes of one job meet: torchrun's c10d rendezvous, seen from outside it.

Before a multi-node launch we refuse an endpoint the nodes cannot share (a loopback
address when the scheduler put them on different hosts); while the nodes gather, we
read torchrun's own rendezvous state to say how many came, and each node publishes its
launch settings in torchrun's store beside it, so that nodes started with another
``--nnodes`` stop naming it (torchrun never forms their group, or forms one of the size
the other node asked for, and the ranks' own settings check never sees the difference).
A node that joins the store as a client waits for its host to listen before torchrun
starts (:func:`wait_for_store`), so nodes may start minutes apart.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import sys
import time

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
        ("datetime", "timezone"),  # torch 2.14: deadlines are aware (UTC)
        ("builtins", "set"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a rendezvous state")
        return super().find_class(module, name)


#: seconds between looks at the endpoint while a node waits for the rendezvous host
STORE_POLL_S = 1.0
#: seconds between the lines that say a node is still waiting
STORE_NOTE_S = 60.0


def hosts_store_here(endpoint: str) -> bool:
    """Whether torchrun on this node hosts the rendezvous store at ``endpoint``.

    torch's own rule, called as torch calls it (2.14.1,
    ``c10d_rendezvous_backend._create_tcp_store``: without ``is_host`` in
    ``--rdzv-conf``, ``utils._matches_machine_hostname``): a loopback address or
    ``localhost``, this machine's host name, or an address that name resolves to. Every
    other node joins as a client of that store.
    """
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    return bool(_matches_machine_hostname(split_endpoint(endpoint)[0]))


def wait_for_store(endpoint: str, timeout_s: float) -> float:
    """On a node whose torchrun joins as a client: wait until something listens at
    ``endpoint`` (the host's torchrun started), for up to ``timeout_s``; the seconds
    waited. A ``TrainingError`` naming the seconds when nothing came.

    Why: torchrun's store client gives up after its ``read_timeout`` (60 s; torch 2.14.1
    retries once, so 60-112 s), however long ``join_timeout`` is, and pods of one job
    start minutes apart (image pulls, a replaced node). Raising ``read_timeout`` instead
    would also make every store read of a running job wait that long: torchrun's agent
    reads the store every few seconds while its ranks train, and a host that vanished
    without closing its sockets would then hold every other node for up to
    ``--rdzv-timeout`` instead of a minute. So the wait is here, before torchrun starts,
    and torchrun keeps its own timeout for a store that goes away.
    """
    from ..errors import TrainingError

    host, port = split_endpoint(endpoint)
    started = time.monotonic()
    noted = None
    while True:
        try:
            socket.create_connection((host, port), timeout=5).close()
            return time.monotonic() - started
        except OSError:
            pass  # nothing listens yet (refused, unresolvable until the host's pod is up)
        waited = time.monotonic() - started
        if waited >= timeout_s:
            raise TrainingError(
                f"nothing answered at {endpoint} for {waited:.0f} s (--rdzv-timeout "
                f"{timeout_s:.0f}): this node joins the rendezvous the first node's torchrun "
                "hosts there, and it never started listening; start the same command on "
                "that node, check that this node reaches that address and port (a firewall "
                "or security group may block it), or raise --rdzv-timeout"
            )
        if noted is None or waited - noted >= STORE_NOTE_S:
            print(
                f"waiting for the rendezvous host at {endpoint} (its torchrun has not "
                f"started): {waited:.0f} s of up to {timeout_s:.0f} s",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            noted = waited
        time.sleep(STORE_POLL_S)


#: the keys of the launch settings in torchrun's store: a counter numbers the nodes as
#: they publish (``count``), each node's entry (``N``) and how many entries it has read
#: (``seen.N``). torchrun's own keys start with ``torch.``.
LAUNCH_KEY = "qwen3-trn.launch."
#: the most entries read back (a job's nodes; more means something else wrote the keys)
MAX_NODES = 4096
#: seconds a node that found a difference waits for the others to read its settings
#: before it stops its torchrun (the store may live in it: then the others lose it)
TELL_OTHERS_S = 10.0


def launch_entry(settings: dict[str, int]) -> str:
    """This node's entry: its launch settings, named as the user knows the flags (only
    what torchrun takes, which the ranks cannot compare), its host and launcher pid."""
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "settings": settings})


def _store(endpoint: str):
    """A client of the TCPStore at ``endpoint`` (torchrun's: the caller made sure).
    OSError when nothing listens there (a plain probe: a TCPStore client that cannot
    connect retries, and logs pages of C++)."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    host, port = split_endpoint(endpoint)
    socket.create_connection((host, port), timeout=1).close()
    return TCPStore(host, port, is_master=False, timeout=timedelta(seconds=2),
                    wait_for_workers=False)  # fmt: skip


def publish_launch(endpoint: str, entry: str) -> int | None:
    """Put ``entry`` into torchrun's store at ``endpoint``; this node's number (None:
    the store could not be written)."""
    try:
        store = _store(endpoint)
        index = int(store.add(LAUNCH_KEY + "count", 1))
        store.set(f"{LAUNCH_KEY}{index}", entry)
        return index
    except Exception:
        return None


def read_launches(endpoint: str, index: int) -> list[dict] | None:
    """Every node's entry so far, each with its ``index`` and ``seen`` (how many entries
    that node has read); records that node ``index`` has read them all. None: no store."""
    try:
        store = _store(endpoint)
        count = min(int(store.add(LAUNCH_KEY + "count", 0)), MAX_NODES)
        store.set(f"{LAUNCH_KEY}seen.{index}", str(count))
        entries = []
        for i in range(1, count + 1):
            key, seen = f"{LAUNCH_KEY}{i}", f"{LAUNCH_KEY}seen.{i}"
            if not store.check([key]):
                continue  # numbered, not written yet
            try:
                entry = json.loads(store.get(key))  # data only: JSON, never pickle
            except ValueError:
                continue  # not an entry of ours
            if isinstance(entry, dict) and isinstance(entry.get("settings"), dict):
                told = store.get(seen).decode() if store.check([seen]) else "0"
                entries.append({**entry, "index": i, "seen": int(told) if told.isdigit() else 0})
        return entries
    except Exception:
        return None


def _shown(value: object, limit: int = 60) -> str:
    """A value another node wrote, as one printable line (it comes over the network)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


def launch_mismatch(index: int, entries: list[dict]) -> str | None:
    """The first launch setting in which another node differs from node ``index``, as
    the line every node prints; None while they agree (or this node is not listed)."""
    mine = next((e for e in entries if e["index"] == index), None)
    if mine is None:
        return None
    for other in entries:
        if other is mine:
            continue
        theirs = other["settings"]
        for name, value in mine["settings"].items():
            if theirs.get(name) != value:
                there = theirs.get(name, "not given")
                return (
                    f"{name} differs between nodes: {_shown(value)} here ({_shown(mine['host'])}), "
                    f"{_shown(there)} on {_shown(other.get('host'))} (launch pid "
                    f"{_shown(other.get('pid'))}); start the same command on every node"
                )
    return None


def everyone_read(index: int, entries: list[dict]) -> bool:
    """Whether every other node has read every entry this node knows of (so each has
    found the difference too, and stops by itself)."""
    newest = max((e["index"] for e in entries), default=index)
    return all(e["seen"] >= newest for e in entries if e["index"] != index)


#: polls :func:`nodes_joined` in a child process (see :class:`JoinWatch`)
_WATCH = """
import os, sys, threading, time
parent = os.getppid()

def orphaned():  # the launcher gone (even while a read below hangs): go too
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)

threading.Thread(target=orphaned, daemon=True).start()
import json, socket
import torch.distributed  # before the first read: its import is not a slow answer
from qwen3_trn_helpers.runs import rendezvous as rdzv
from qwen3_trn_helpers.training.spec import split_endpoint
endpoint, entry, index = sys.argv[1], sys.argv[2], None
while True:
    try:
        socket.create_connection(split_endpoint(endpoint), timeout=1).close()
    except OSError:
        print("none", flush=True)  # nothing listens there (yet)
    else:
        print("connect", flush=True)  # something listens: is it torchrun's store?
        joined = rdzv.nodes_joined(endpoint)
        print(-1 if joined is None else joined, flush=True)
        if joined is not None and entry:  # torchrun's store: publish, then compare
            index = index or rdzv.publish_launch(endpoint, entry)
            entries = index and rdzv.read_launches(endpoint, index)
            if entries:
                print("launches", json.dumps({"index": index, "entries": entries}), flush=True)
    time.sleep(1)
"""


class JoinWatch:
    """How many nodes have joined so far (``joined``), read every second by a child,
    which also publishes this node's launch settings (``entry``: :func:`launch_entry`)
    and compares them with every other node's (``mismatch``).

    Why a child: a TCPStore client talking to something that is not torchrun's store
    (an HTTP server, a proxy) can block for minutes and prints pages of C++ frames to
    stderr; in a child with its stderr discarded, neither reaches the launch, which ends
    as soon as torchrun does.
    """

    def __init__(self, endpoint: str, entry: str = "") -> None:
        import subprocess
        import sys
        import threading

        self.joined: int | None = None
        #: the first launch setting another node was started with differently
        self.mismatch: str | None = None
        self._found_at, self._told = 0.0, False
        self._store_seen, self._failed_reads = False, 0
        self._asking_since: float | None = None
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _WATCH, endpoint, entry], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout or ():
            word = line.strip()
            if word.startswith("launches "):
                seen = json.loads(word.removeprefix("launches "))
                found = launch_mismatch(seen["index"], seen["entries"])
                if found and not self.mismatch:
                    self.mismatch, self._found_at = found, time.monotonic()
                self._told |= bool(found) and everyone_read(seen["index"], seen["entries"])
                continue
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
        hung = self._asking_since is not None and time.monotonic() - self._asking_since > 5
        return (self._failed_reads >= 3 or hung) and not self._store_seen

    @property
    def stop_for(self) -> str | None:
        """:attr:`mismatch`, once every other node has read this node's settings (so
        each stops by itself) or :data:`TELL_OTHERS_S` passed: then stop this node."""
        if self.mismatch is None:
            return None
        late = time.monotonic() - self._found_at > TELL_OTHERS_S
        return self.mismatch if self._told or late else None

    def close(self) -> None:
        """Stop polling (at the first step, and at the end; again is harmless)."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
