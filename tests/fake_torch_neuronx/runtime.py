"""The Neuron runtime's start in a process group, as torch-neuronx's first
``ProcessGroupNeuron`` makes it (distributed/backend.py:292-315, ``_neuron_runtime_setup``:
``_set_rt_visible_cores`` :205-267, ``_set_root_comm_id`` :270-289), and the runtime's
root communicator, which rank 0 binds and every other rank dials.

On one machine every 127.x address is local, so a bind alone would succeed anywhere;
the double is told each pretend node's own address (``FAKE_TORCH_NEURONX_NODE_ADDR``,
set per torchrun agent by the test) and fails as the runtime would on a real node when
the root address is not rank 0's: rank 0 cannot bind there. That the root address is
rank 0's is documented (nrt-developer-guide.rst:1062-1064: "the IP address and ... port
for the rank 0 worker"; nccom-test.rst:329: "the IP address of the first host listed and
any free port"); that rank 0 *binds* it and a foreign address fails there is inferred
(a port that must be free, and "reserve the port": archive/nxd-training/
training-troubleshooting.rst:320-335; backend.py:314 "the barrier ... so that we reserve
the port"), not stated by a source.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

_ROOT_SOCKET: socket.socket | None = None


class RootCommError(RuntimeError):
    """The Neuron runtime's root communicator cannot form (bind or connect fails)."""


#: the port rank 0 picked, still held (see :func:`set_root_comm_id`)
_PICKED: socket.socket | None = None


def set_root_comm_id(rank: int, store) -> str:
    """torch-neuronx's ``_set_root_comm_id``: a preset NEURON_RT_ROOT_COMM_ID is kept;
    else rank 0 picks a free port and shares it through the store, and every rank
    uses MASTER_ADDR (default localhost) with it.

    torch-neuronx picks the port by binding port 0 and closing it (``get_free_port``),
    and the runtime binds it later, in its bootstrap: a window in which another process
    can take it. The double keeps the socket it picked the port with, listening, until
    the bootstrap: on a machine where many tests start ranks at once, that window made
    runs fail for a reason no code of ours decides."""
    global _PICKED
    if os.environ.get("NEURON_RT_ROOT_COMM_ID") is None:
        if rank == 0:
            _PICKED = socket.socket()
            _PICKED.bind(("", 0))
            _PICKED.listen()
            root_port = str(_PICKED.getsockname()[1])
            store.set("NEURON_RT_PORT", root_port)
        else:
            root_port = store.get("NEURON_RT_PORT").decode("UTF-8")
        root_addr = os.environ.get("MASTER_ADDR", "localhost")
        os.environ["NEURON_RT_ROOT_COMM_ID"] = f"{root_addr}:{root_port}"
    return os.environ["NEURON_RT_ROOT_COMM_ID"]


def _ipv4(host: str) -> set[str]:
    try:
        return {ai[4][0] for ai in socket.getaddrinfo(host, None, socket.AF_INET)}
    except socket.gaierror:
        return set()


def _node_addresses() -> set[str]:
    """This pretend node's addresses: the one the test gave it, else the machine's name's."""
    given = os.environ.get("FAKE_TORCH_NEURONX_NODE_ADDR")
    return _ipv4(given) if given else _ipv4(socket.gethostname()) | {"127.0.0.1"}


def start_root_communicator(rank: int, store, root: str, timeout_s: float = 30.0) -> None:
    """Rank 0 binds the root socket at ``root``; every other rank connects to the
    address *it* computed and must reach rank 0 (the runtime's bootstrap)."""
    global _ROOT_SOCKET
    host, _, port = root.rpartition(":")
    if rank == 0:
        here = _node_addresses()
        if not (_ipv4(host) & here):
            why = (
                f"rank 0 cannot bind the root communicator at {root}: {host} is not an "
                f"address of rank 0's node ({', '.join(sorted(here))}) (bind: Cannot assign "
                "requested address)"
            )
            store.set("fake_root", f"fail: {why}")
            raise RootCommError(f"fake_torch_neuronx (Neuron runtime): {why}")
        if _PICKED is not None and _PICKED.getsockname()[1] == int(port):
            server = _PICKED  # (bound to every address of this node, host among them)
        else:
            server = socket.socket()
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((host, int(port)))
            server.listen()
        _ROOT_SOCKET = server

        def answer() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(f"root {root}".encode())

        threading.Thread(target=answer, daemon=True).start()
        store.set("fake_root", f"ok {root}")
        return
    said = store.get("fake_root").decode()
    if said.startswith("fail:"):
        raise RootCommError(f"fake_torch_neuronx (Neuron runtime): rank 0 said {said}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
            reply = conn.recv(200).decode()
    except OSError as e:
        raise RootCommError(
            f"fake_torch_neuronx (Neuron runtime): rank {rank} cannot reach the root "
            f"communicator at {root} ({e}); rank 0 listens at {said.split()[1]}"
        ) from None
    if reply != f"root {said.split()[1]}":
        raise RootCommError(f"fake_torch_neuronx: rank {rank} reached {reply!r}, not rank 0")


def set_rt_visible_cores(rank: int, size: int, store) -> tuple[int, int]:
    """``_set_rt_visible_cores`` (backend.py:205-267): the local rank and local world size
    from torchrun's variables (else from every rank's host, through the store), and
    NEURON_RT_VISIBLE_CORES = the local rank, only while it is unset (:216-218)."""
    local_rank, local_size = os.environ.get("LOCAL_RANK"), os.environ.get("LOCAL_WORLD_SIZE")
    if local_rank is None or local_size is None:  # :221-261
        host = socket.gethostbyname(socket.gethostname())
        store.set(f"worker_{rank}", f"{host}:{rank}")
        peers = [store.get(f"worker_{i}").decode().split(":") for i in range(size)]
        here = sorted(int(r) for ip, r in peers if ip == host)
        local_rank, local_size = str(here.index(rank)), str(len(here))
    if not os.environ.get("NEURON_RT_VISIBLE_CORES"):
        os.environ["NEURON_RT_VISIBLE_CORES"] = local_rank
    return int(local_rank), int(local_size)


def neuron_runtime_setup(rank: int, size: int, store) -> str:
    """``_neuron_runtime_setup`` (backend.py:292-315), once per process: the runtime must
    not have started; visible cores, the root communicator id, the device state that
    binds this process to ``neuron:LOCAL_RANK`` (:300-303); the runtime starts; one
    visible core only; then the runtime's bootstrap (its barrier, :315)."""
    from .device_module import STATE, logical_core_count, start_runtime

    assert not STATE["runtime"], (  # backend.py:293-295
        "Neuron runtime should not be initialized before the init_process_group."
    )
    local_rank, local_size = set_rt_visible_cores(rank, size, store)
    root = set_root_comm_id(rank, store)
    STATE["local_world_size"], STATE["start"] = local_size, local_rank  # :302-303
    start_runtime()  # :307
    assert logical_core_count() == 1, (  # backend.py:310-312
        "Attempted to have more than one device per process in distributed setup"
    )
    _record(rank, root)
    start_root_communicator(rank, store, root)
    # the runtime's barrier (_nrt_barrier right after nrt_init): every rank reached the
    # root before any goes on
    store.add("fake_root_reached", 1)
    deadline = time.monotonic() + 60
    while store.add("fake_root_reached", 0) < size:
        if time.monotonic() > deadline:
            raise RootCommError("fake_torch_neuronx: the runtime's barrier timed out")
        time.sleep(0.05)
    return root


def _record(rank: int, root: str) -> None:
    folder = os.environ.get("FAKE_TORCH_NEURONX_RECORD")
    if not folder:
        return
    seen = {
        "rank": rank,
        "group_rank": os.environ.get("GROUP_RANK"),
        "node": os.environ.get("FAKE_TORCH_NEURONX_NODE_ADDR"),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "root_comm_id": root,
        "visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
    }
    Path(folder, f"rank{rank}.json").write_text(json.dumps(seen))
