"""The Neuron driver's sysfs tree, under a fake root: what ops/smoke/device_memory.py reads.

Layout (aws-neuron-driver ``neuron_sysfs_metrics.c``, driver 2.24/2.28; Neuron sysfs
user guide): ``devices/virtual/neuron_device/neuron{d}/neuron_core{c}/stats/
memory_usage/device_mem/<category>/{present,peak}``, one ``neuron_core`` per
*physical* core (8 per trn2 chip; at LNC 2 a logical core is two of them). A peak
persists until 0 is written to it (torch-neuronx's tests write 0 first). The driver's
version is ``module/neuron/version`` (``MODULE_VERSION`` in neuron_module.c). The
Neuron 2.33 guide says driver 2.31 moved sysfs nodes: ``build(moved=True)`` leaves the
counters out, as a driver whose tree we cannot read.
"""

from __future__ import annotations

from pathlib import Path

from .device_module import PHYSICAL_CORES_PER_CHIP

#: the device-memory categories (Neuron sysfs user guide)
CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory",
              "tensors", "collectives", "dma_rings")  # fmt: skip
DRIVER_VERSION = "2.24.7.0"


def core_folder(root: Path, chip: int, core: int) -> Path:
    return (root / "devices/virtual/neuron_device" / f"neuron{chip}" / f"neuron_core{core}"
            / "stats/memory_usage/device_mem")  # fmt: skip


def build(root: Path, *, chips: int = 16, moved: bool = False) -> Path:
    """The tree with every counter at 0 (``moved``: no counters where we look)."""
    version = root / "module/neuron/version"
    version.parent.mkdir(parents=True, exist_ok=True)
    version.write_text(DRIVER_VERSION + "\n")
    for chip in range(chips):
        for core in range(PHYSICAL_CORES_PER_CHIP):
            folder = core_folder(root, chip, core)
            if moved:
                folder.parent.parent.mkdir(parents=True, exist_ok=True)
                continue
            for category in CATEGORIES:
                (folder / category).mkdir(parents=True, exist_ok=True)
                (folder / category / "present").write_text("0\n")
                (folder / category / "peak").write_text("0\n")
    return root


def use(root: Path, chip: int, core: int, category: str, nbytes: int) -> None:
    """A job holds ``nbytes`` on a physical core: present, and peak if higher (kept)."""
    folder = core_folder(root, chip, core) / category
    (folder / "present").write_text(f"{nbytes}\n")
    peak = int((folder / "peak").read_text())
    (folder / "peak").write_text(f"{max(peak, nbytes)}\n")


def release(root: Path, chip: int, core: int, category: str) -> None:
    """The job ended: present drops to 0, the peak stays (until 0 is written)."""
    (core_folder(root, chip, core) / category / "present").write_text("0\n")
