"""A node's own EFA: what its instance type has, and how many of them are up.

The fabric check (ops/fabric.py) derives its figures from the instance it runs on,
not from trn2's alone:

- the instance type: EC2 writes it into the DMI product name
  (``/sys/devices/virtual/dmi/id/product_name``, e.g. ``trn1.32xlarge``), read without
  the metadata service;
- what that type has (:data:`INSTANCE_EFA`): its EFA devices and their bandwidth in
  all, from AWS's documents;
- what is up: the RDMA devices the ``efa`` driver registered
  (``/sys/class/infiniband/<dev>/device/driver``) whose port 1 is ``ACTIVE``
  (``ports/1/state``, Linux's sysfs-class-infiniband ABI).

A node whose active EFA devices are fewer than its type's fails the check: a node with
half its EFA down carries at most half its bandwidth, and the bus bandwidth alone does
not tell it from a healthy one (ops/fabric.py says why). Plain file reads; ``root``
lets a test stand in a fake /sys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: instance type -> (EFA devices, EFA Gbit/s in all). trn1: "trn1.32xlarge has 8 EFA
#: devices, trn1n.32xlarge has 16" (Neuron docs, setup-trn1-multi-node-execution) at 800
#: and 1,600 Gbps (Neuron docs, Trn1 architecture); trn2: 3.2 Tbps of EFAv3 (AWS's Trn2
#: page; Neuron docs, Trn2 architecture) over 16 EFA devices (Neuron docs, deploy/eks/
#: dra.rst: a trn2.48xlarge pod takes vpc.amazonaws.com/efa "16"); trn2u the same instance
#: in an UltraServer.
INSTANCE_EFA = {
    "trn1.32xlarge": (8, 800.0),
    "trn1n.32xlarge": (16, 1600.0),
    "trn2.48xlarge": (16, 3200.0),
    "trn2u.48xlarge": (16, 3200.0),
}
PRODUCT_NAME = "sys/devices/virtual/dmi/id/product_name"
INFINIBAND = "sys/class/infiniband"


@dataclass(frozen=True)
class NodeEfa:
    """One node's EFA: its instance type's figures and what is up."""

    instance: str
    expected: int  # EFA devices the instance type has
    gbit_s: float  # their bandwidth in all
    active: int  # efa devices whose port is ACTIVE

    @property
    def complete(self) -> bool:
        return self.active >= self.expected

    def words(self) -> str:
        return f"{self.active} of {self.instance}'s {self.expected} EFA devices active"


def instance_type(root: Path = Path("/")) -> str | None:
    """This EC2 instance's type, from its DMI product name (None: not one, or unreadable)."""
    try:
        return (root / PRODUCT_NAME).read_text().strip() or None
    except OSError:
        return None


def active_efa_devices(root: Path = Path("/")) -> int:
    """RDMA devices the ``efa`` driver registered whose port 1 is ACTIVE."""
    count = 0
    for dev in sorted((root / INFINIBAND).glob("*")):
        try:
            driver = (dev / "device" / "driver").resolve().name
            state = (dev / "ports" / "1" / "state").read_text()
        except OSError:
            continue
        if driver == "efa" and "ACTIVE" in state:
            count += 1
    return count


def node_efa(root: Path = Path("/")) -> NodeEfa | None:
    """This node's EFA against its type's figures; None on an instance type not in
    :data:`INSTANCE_EFA` (or not an EC2 instance): nothing to compare with."""
    kind = instance_type(root)
    if kind not in INSTANCE_EFA:
        return None
    expected, gbit_s = INSTANCE_EFA[kind]
    return NodeEfa(kind, expected, gbit_s, active_efa_devices(root))
