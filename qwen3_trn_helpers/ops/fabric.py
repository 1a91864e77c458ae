"""The fabric check a job on several nodes runs before it trains: every rank of every
node, an all-reduce large enough to measure bandwidth, one figure per node, a floor.

Why: one rank per node shows that the nodes reach each other, not that a node's 16
EFA interfaces carry what 64 ranks need. A node with half its interfaces down, or
whose collectives fell back to TCP sockets, passes such a check and then slows every
step of the job. Here every rank joins (``nproc`` per node, 64 on a trn2.48xlarge).

The figure is the all-reduce's *bus bandwidth* as nccl-tests define it
(NVIDIA/nccl-tests, doc/PERFORMANCE.md): algorithm bandwidth ``algbw = S / t`` for
``S`` bytes in ``t`` seconds, and ``busbw = algbw * 2 (n - 1) / n`` for ``n`` ranks,
the traffic each rank's busiest link carries. Across nodes that link is the node's
network, so it compares with the node's EFA bandwidth; Neuron's ``nccom-test`` prints
the same two columns.

One figure per node: each node all-reduces with its neighbours on a ring of the nodes
(node i with node i + 1), every rank of both; a node's figure is its best pair's. A
slow node slows both its pairs and only those: with three nodes or more it alone
falls below the floor; with two, both do (there is no third to tell them apart), and
the job fails either way. Pairs run in rounds that share no node.

The floor, from the node's own instance (ops/efa.py): its type, read from its DMI
product name, gives its EFA devices and their bandwidth in all (a trn2.48xlarge: 16 and
3.2 Tbps; a trn1.32xlarge: 8 and 800 Gbps). Two checks follow from those figures:

- every EFA device the type has is up (the efa driver's RDMA devices, port ACTIVE): a
  node with half its EFA down fails here, by name. Bandwidth alone cannot fail it
  without failing healthy nodes: half the devices cap a node at half its line rate,
  and a healthy pair measures below that already (Neuron's nccom-test guide, its
  two-instance all-reduce on trn1: 41 GB/s of the 100 at 256 MiB, 47 at 1 GiB), so
  any bandwidth floor between the two would be a guess;
- the bus bandwidth is at least :data:`FLOOR_FRACTION` of the instance's own line
  rate (:func:`default_floor_gb_s`; trn2's 3.2 Tbps where the type is unknown): what
  fails a node whose collectives run over TCP (an ENA interface, a few percent of
  that) or whose links are degraded. A starting point, not a measured figure (nothing
  here ran on Trainium); ``--fabric-floor`` sets it once a healthy pair is measured.

On a CPU there is no floor unless one is given (gloo over loopback measures the host,
not a fabric), and no EFA to count.

Where ``nccom-test`` (Neuron's collectives benchmark) is installed, the Slurm script
runs it instead (:func:`nccom_main`), through srun on the job's own allocation (its
``--slurm-mode``; MPI mode would need ssh to every node), over every node at once, after
each node has counted its EFA devices; below the floor, the per-node check above then
names the node.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..trn2 import EFA_GBIT_S_PER_NODE
from .efa import NodeEfa, node_efa

#: the floor's share of the instance's EFA bandwidth (see the module's docstring)
FLOOR_FRACTION = 0.25
#: bytes all-reduced per measurement: on trn2 past the latency-bound sizes (nccl-tests'
#: and nccom-test's bandwidth rows start in the tens of MiB); on a CPU small enough for
#: gloo over loopback on a shared machine
NEURON_BYTES = 256 * 2**20
CPU_BYTES = 4 * 2**20
#: all-reduces before timing (first-call set-up, compiled collectives) and timed
WARMUP, TIMED = 2, 5
#: what the job file passes to every rank (through srun and torchrun)
FLOOR_ENV = "QWEN3_TRN_FABRIC_FLOOR_GBS"
BYTES_ENV = "QWEN3_TRN_FABRIC_BYTES"


def default_floor_gb_s(device_type: str, efa: NodeEfa | None = None) -> float | None:
    """The floor in GB/s of bus bandwidth: a share of the instance's own EFA bandwidth
    (``efa``; trn2's where its type is unknown) on Neuron, none elsewhere."""
    if device_type != "neuron":
        return None
    gbit_s = efa.gbit_s if efa is not None else EFA_GBIT_S_PER_NODE
    return FLOOR_FRACTION * gbit_s / 8


def floor_source(floor: float | None, device_type: str, efa: NodeEfa | None = None) -> str:
    """Where the floor comes from, for the lines each node prints."""
    if floor is None:
        return "no floor on a CPU (pass --fabric-floor to set one)"
    default = default_floor_gb_s(device_type, efa)
    if default is not None and abs(floor - default) < 1e-9:
        if efa is not None:
            return (
                f"floor {floor:g} GB/s: {FLOOR_FRACTION:.0%} of this {efa.instance}'s "
                f"{efa.gbit_s / 1000:g} Tbps EFA"
            )
        return (
            f"floor {floor:g} GB/s: {FLOOR_FRACTION:.0%} of a trn2.48xlarge's "
            f"{EFA_GBIT_S_PER_NODE / 1000:g} Tbps EFA"
        )
    return f"floor {floor:g} GB/s (--fabric-floor)"


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> float:
    """An all-reduce's bus bandwidth in GB/s (nccl-tests: algbw x 2(n-1)/n)."""
    if seconds <= 0 or ranks < 2:
        raise ValueError(f"bus bandwidth needs time > 0 and 2 ranks or more ({seconds}, {ranks})")
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def node_pairs(nodes: int) -> list[tuple[int, int]]:
    """The ring of nodes as pairs: (0, 1) for two nodes, (i, i + 1 mod n) for more."""
    if nodes < 2:
        return []
    if nodes == 2:
        return [(0, 1)]
    return [(i, (i + 1) % nodes) for i in range(nodes)]


def rounds(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``pairs`` in rounds in which no node is in two pairs (they run at once)."""
    out: list[list[tuple[int, int]]] = []
    for pair in pairs:
        for group in out:
            if not any(set(pair) & set(other) for other in group):
                group.append(pair)
                break
        else:
            out.append([pair])
    return out


def node_figures(figures: dict[tuple[int, int], float], nodes: int) -> list[float]:
    """Each node's figure: the best of the pairs it is in."""
    return [max(v for pair, v in figures.items() if node in pair) for node in range(nodes)]


@dataclass(frozen=True)
class Verdict:
    node: int
    gb_s: float
    floor: float | None

    @property
    def passed(self) -> bool:
        return self.floor is None or self.gb_s >= self.floor


def verdicts(figures: dict[tuple[int, int], float], nodes: int, floor: float | None):
    return [Verdict(n, v, floor) for n, v in enumerate(node_figures(figures, nodes))]


def _timed_all_reduce(tensor, group, synchronize: Callable[[], None]) -> float:
    """Seconds per all-reduce of ``tensor`` in ``group``: the slowest rank's mean."""
    import torch
    import torch.distributed as dist

    for _ in range(WARMUP):
        dist.all_reduce(tensor, group=group)
    synchronize()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(TIMED):
        dist.all_reduce(tensor, group=group)
    synchronize()
    seconds = (time.perf_counter() - start) / TIMED
    elapsed = torch.tensor([seconds], dtype=torch.float32, device=tensor.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's
    return float(elapsed.item())


def measure(device, nbytes: int, nproc: int) -> tuple[dict[tuple[int, int], float], float]:
    """Under an initialised process group of ``nodes x nproc`` ranks (every rank calls
    this): each node pair's bus bandwidth and the whole job's, in GB/s."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    nodes, node = world // nproc, rank // nproc
    kind = device.type
    module = getattr(torch, kind, None)
    sync = getattr(module, "synchronize", None) if kind != "cpu" else None

    def synchronize() -> None:
        if sync is not None:
            sync()

    elements = max(nbytes // 4, 1)
    tensor = torch.ones(elements, dtype=torch.float32, device=device)
    job = bus_bandwidth(elements * 4, _timed_all_reduce(tensor, None, synchronize), world)
    figures: dict[tuple[int, int], float] = {}
    pairs = node_pairs(nodes)
    # every rank creates every group, in the same order (torch.distributed's rule)
    groups = {
        p: dist.new_group([r for n in p for r in range(n * nproc, (n + 1) * nproc)]) for p in pairs
    }
    for batch in rounds(pairs):
        mine = [p for p in batch if node in p]
        if mine:
            seconds = _timed_all_reduce(tensor, groups[mine[0]], synchronize)
            figures[mine[0]] = bus_bandwidth(elements * 4, seconds, 2 * nproc)
        dist.barrier()  # the next round starts together
    # every rank learns every pair's figure (a pair's ranks agree on theirs)
    table = torch.zeros(len(pairs), dtype=torch.float32, device=device)
    for i, p in enumerate(pairs):
        if p in figures and rank == p[0] * nproc:  # one writer per pair
            table[i] = figures[p]
    dist.all_reduce(table)
    values = table.cpu().tolist()
    return {p: float(values[i]) for i, p in enumerate(pairs)}, job


def check_here(device, nproc: int) -> tuple[bool, str]:
    """This rank's node: (passed, the line its node prints). Reads the floor and the
    size from the environment the job file set (:data:`FLOOR_ENV`, :data:`BYTES_ENV`)."""
    kind = device.type
    efa = node_efa() if kind == "neuron" else None  # (this instance's own figures)
    floor_text = os.environ.get(FLOOR_ENV, "")
    floor = float(floor_text) if floor_text else default_floor_gb_s(kind, efa)
    default_bytes = NEURON_BYTES if kind == "neuron" else CPU_BYTES
    nbytes = int(os.environ.get(BYTES_ENV) or default_bytes)
    import torch.distributed as dist

    figures, job = measure(device, nbytes, nproc)
    nodes, node = dist.get_world_size() // nproc, dist.get_rank() // nproc
    mine = verdicts(figures, nodes, floor)[node]
    size = f"{nbytes / 2**20:g} MiB"
    said = (
        f"bus bandwidth {mine.gb_s:.2f} GB/s (its best node pair, {2 * nproc} ranks, "
        f"all-reduce of {size}; all {nodes * nproc} ranks at once: {job:.2f} GB/s; "
        f"{floor_source(floor, kind, efa)})"
    )
    if not mine.passed:
        said = f"bus bandwidth {mine.gb_s:.2f} GB/s is below the floor: {said}"
    if efa is not None:
        said = f"{efa.words()}; {said}"
        if not efa.complete:  # (the bandwidth cannot tell: the module's docstring)
            return False, f"EFA down: {said}"
    return mine.passed, said


# --- nccom-test, where Neuron's tools are installed ------------------------------------

_NCCOM_AVG = re.compile(r"Avg bus bandwidth:\s*([0-9.]+)\s*GB/s")


def nccom_command(nnodes: int, nproc: int, nbytes: int, job_id: str) -> list[str]:
    """nccom-test's all-reduce over every node of the job, started through srun on the
    job's own allocation (Neuron's nccom-test guide, "Slurm Execution": ``--slurm-mode``
    and ``--slurm-job-id``; ``-N`` nodes, ``-r`` ranks in all)."""
    return ["nccom-test", "-N", str(nnodes), "-r", str(nnodes * nproc), "-b", str(nbytes),
            "-e", str(nbytes), "-d", "fp32", "allr", "--slurm-mode", "--slurm-job-id",
            job_id]  # fmt: skip


def parse_nccom(text: str) -> float:
    """nccom-test's ``Avg bus bandwidth`` in GB/s; ValueError naming what it printed."""
    found = _NCCOM_AVG.findall(text)
    if not found:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise ValueError(f"nccom-test printed no 'Avg bus bandwidth' line: {tail or 'nothing'}")
    return float(found[-1])


def nccom_main(argv: Sequence[str], run=subprocess.run) -> int:
    """``python -m qwen3_trn_helpers.ops.fabric nccom ...``: nccom-test over the job's
    nodes (through srun), its figure against the floor; exit 1 below it (the script
    then runs the per-node check, which names the node)."""
    parser = argparse.ArgumentParser(prog="qwen3_trn_helpers.ops.fabric nccom")
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--nnodes", type=int, required=True)
    parser.add_argument("--bytes", type=int, default=NEURON_BYTES)
    parser.add_argument("--floor", type=float, default=None)
    parser.add_argument("--job-id", required=True, help="the Slurm job whose nodes to use")
    args = parser.parse_args(argv)
    efa = node_efa()  # (this node's type: the job's nodes are one type)
    floor = default_floor_gb_s("neuron", efa) if args.floor is None else args.floor
    cmd = nccom_command(args.nnodes, args.nproc, args.bytes, args.job_id)
    done = run(cmd, capture_output=True, text=True)
    try:
        figure = parse_nccom(done.stdout)
    except ValueError as e:
        print(f"error: {shlex.join(cmd)} (exit {done.returncode}): {e}", file=sys.stderr)
        figure = 0.0
    ok = figure >= floor
    print(f"{'ok' if ok else 'fail'}: all {args.nnodes} nodes ({args.nnodes * args.nproc} "
          f"ranks): nccom-test bus bandwidth {figure:.2f} GB/s, all-reduce of "
          f"{args.bytes / 2**20:g} MiB ({floor_source(floor, 'neuron', efa)})")  # fmt: skip
    return 0 if ok else 1


def efa_main() -> int:
    """``python -m qwen3_trn_helpers.ops.fabric efa``: this node's EFA devices against its
    instance type's; exit 1 when fewer are up (an unknown type: said, and passed)."""
    import socket

    efa = node_efa()
    where = f"node {socket.gethostname()}"
    if efa is None:
        print(f"ok: {where}: instance type not known here; its EFA devices not counted")
        return 0
    print(f"{'ok' if efa.complete else 'fail'}: {where}: {efa.words()} (sysfs)")
    return 0 if efa.complete else 1


if __name__ == "__main__":
    verb = sys.argv[1:2]
    if verb == ["efa"]:
        sys.exit(efa_main())
    if verb != ["nccom"]:
        sys.exit(
            "usage: python -m qwen3_trn_helpers.ops.fabric nccom --nproc N --nnodes N "
            "--job-id ID | efa"
        )
    sys.exit(nccom_main(sys.argv[2:]))
