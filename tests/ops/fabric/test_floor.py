"""The fabric check's figures from the node's own instance (ops/efa.py, ops/fabric.py):
its type from the DMI product name, its EFA devices from sysfs, the floor from its line
rate; a node with half its EFA down fails, which no bandwidth floor could do safely."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qwen3_trn_helpers.ops import efa, fabric


def fake_sys(root: Path, instance: str | None, devices: dict[str, tuple[str, str]]) -> Path:
    """A /sys with a DMI product name and RDMA devices (name -> (driver, port state))."""
    if instance is not None:
        dmi = root / efa.PRODUCT_NAME
        dmi.parent.mkdir(parents=True)
        dmi.write_text(instance + "\n")
    drivers = root / "sys/bus/pci/drivers"
    for name, (driver, state) in devices.items():
        dev = root / efa.INFINIBAND / name
        (dev / "ports" / "1").mkdir(parents=True)
        (dev / "ports" / "1" / "state").write_text(state + "\n")
        (drivers / driver).mkdir(parents=True, exist_ok=True)
        (dev / "device").mkdir()
        os.symlink(drivers / driver, dev / "device" / "driver")
    return root


def trn2(root: Path, up: int, down: int = 0) -> Path:
    devices = {f"rdmap{i}s0": ("efa", "4: ACTIVE") for i in range(up)}
    devices |= {f"rdmap{100 + i}s0": ("efa", "1: DOWN") for i in range(down)}
    devices["mlx5_0"] = ("mlx5_core", "4: ACTIVE")  # not an EFA device: not counted
    return fake_sys(root, "trn2.48xlarge", devices)


def test_a_node_with_all_its_efa_is_complete(tmp_path):
    node = efa.node_efa(trn2(tmp_path, up=16))
    assert node == efa.NodeEfa("trn2.48xlarge", 16, 3200.0, 16) and node.complete
    assert node.words() == "16 of trn2.48xlarge's 16 EFA devices active"


def test_half_its_efa_down_is_incomplete(tmp_path):
    node = efa.node_efa(trn2(tmp_path, up=8, down=8))
    assert node.active == 8 and not node.complete


def test_the_floor_comes_from_the_instances_own_line_rate(tmp_path):
    """25% of the node's type's EFA bandwidth: trn1.32xlarge's 800 Gbps gives 25 GB/s,
    trn2's 3.2 Tbps 100; a node of unknown type: trn2's, said as such."""
    trn1 = efa.node_efa(fake_sys(tmp_path / "a", "trn1.32xlarge", {}))
    assert (trn1.expected, trn1.gbit_s) == (8, 800.0)
    assert fabric.default_floor_gb_s("neuron", trn1) == pytest.approx(25.0)
    assert "25% of this trn1.32xlarge's 0.8 Tbps EFA" in fabric.floor_source(25.0, "neuron", trn1)
    assert efa.node_efa(fake_sys(tmp_path / "b", "m7i.large", {})) is None
    assert efa.node_efa(tmp_path / "nothing") is None  # not an EC2 instance
    assert fabric.default_floor_gb_s("neuron", None) == pytest.approx(100.0)


def test_no_bandwidth_floor_separates_half_down_from_healthy():
    """Why the device count decides: half the devices cap a node at half its line rate,
    and a healthy pair already measures below that (Neuron's nccom-test guide, two trn1
    instances: 41.17 GB/s at 256 MiB of the 100 GB/s line), so a floor above the cap
    fails healthy nodes and one below it passes half-down ones."""
    line_gb_s = 800 / 8
    healthy_example = 41.17  # nccom-test guide, "Multiple Instances Example", 268435456 B
    half_down_cap = line_gb_s / 2
    assert healthy_example < half_down_cap
    assert fabric.default_floor_gb_s("neuron", efa.NodeEfa("trn1.32xlarge", 8, 800.0, 8)) < (
        healthy_example
    )


def test_check_here_fails_a_half_down_node_whatever_its_bandwidth(monkeypatch):
    """The rung's own check on a trn2 node: 300 GB/s clears the 100 GB/s floor, and the
    node fails all the same with 8 of its 16 EFA devices up; with 16 it passes."""
    import types

    import torch.distributed as dist

    monkeypatch.setattr(fabric, "measure", lambda device, nbytes, nproc: ({(0, 1): 300.0}, 290.0))
    monkeypatch.setattr(dist, "get_world_size", lambda: 128)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.delenv(fabric.FLOOR_ENV, raising=False)
    neuron = types.SimpleNamespace(type="neuron")
    for up, passed in ((16, True), (8, False)):
        node = efa.NodeEfa("trn2.48xlarge", 16, 3200.0, up)
        monkeypatch.setattr(fabric, "node_efa", lambda node=node: node)
        ok, said = fabric.check_here(neuron, 64)
        assert ok is passed, said
        assert f"{up} of trn2.48xlarge's 16 EFA devices active" in said
        assert "300.00 GB/s" in said and "25% of this trn2.48xlarge's 3.2 Tbps EFA" in said
        assert said.startswith("EFA down: ") is not passed
