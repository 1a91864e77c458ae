"""The Neuron driver's device-memory counters (sysfs), read around the 64-rank rung.

The driver counts device memory per physical core and category; the ladder resets the
peaks before the full-size rung (where it may) and reads them per logical core after
it, so ``smoke.json`` records what the device itself held beside the plan's estimate.
"""

from __future__ import annotations

from pathlib import Path

from ...trn2 import PHYSICAL_CORES_PER_CHIP

#: sysfs's root: the one seam tests use to point the readers below at a fake tree
#: (tests/fake_torch_neuronx/sysfs.py); never changed outside tests
SYSFS_ROOT = Path("/sys")
#: the Neuron driver's counters, one ``neuron_core`` folder per *physical* core (8 per
#: trn2 chip): device memory by category, each a folder with ``present`` and ``peak``
#: bytes (aws-neuron-driver neuron_sysfs_metrics.c, drivers 2.24 and 2.28; Neuron sysfs
#: user guide). The Neuron 2.33 guide says driver 2.31 moved sysfs nodes: where they
#: are not found the reading is null with the reason.
NEURON_COUNTERS = "devices/virtual/neuron_device/neuron*/neuron_core*/stats/memory_usage/device_mem"
#: the driver's version (``MODULE_VERSION`` in aws-neuron-driver neuron_module.c)
DRIVER_VERSION_FILE = "module/neuron/version"


def _core_counters(root: Path) -> dict[tuple[int, int], Path]:
    """(chip, physical core) -> its device_mem folder."""
    found = {}
    for folder in root.glob(NEURON_COUNTERS):
        core_dir = folder.parents[2]
        try:
            chip = int(core_dir.parent.name.removeprefix("neuron"))
            core = int(core_dir.name.removeprefix("neuron_core"))
        except ValueError:
            continue
        found[(chip, core)] = folder
    return found


def _read_bytes(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def neuron_driver_version(root: Path | None = None) -> str | None:
    """The loaded Neuron driver's version, or None without one."""
    try:
        return ((root or SYSFS_ROOT) / DRIVER_VERSION_FILE).read_text().strip() or None
    except OSError:
        return None


def _reset_peak(path: Path) -> None:
    path.write_text("0\n")


def reset_device_memory_peaks(root: Path | None = None) -> bool:
    """Write 0 to every ``peak`` (as torch-neuronx's own tests do before measuring):
    a peak otherwise persists from the driver's load, earlier jobs included. False
    where there is nothing to reset or a write is refused (root owns the counters)."""
    folders = _core_counters(root or SYSFS_ROOT)
    peaks = [c / "peak" for f in folders.values() for c in f.iterdir() if (c / "peak").exists()]
    try:
        for peak in peaks:
            _reset_peak(peak)
    except OSError:
        return False
    return bool(peaks)


def device_memory_totals(root: Path | None = None) -> dict[str, float] | None:
    """Each category's ``present`` bytes summed over every core, in GiB (None: no counters)."""
    totals: dict[str, int] = {}
    for folder in _core_counters(root or SYSFS_ROOT).values():
        for category in folder.iterdir():
            value = _read_bytes(category / "present")
            if value is not None:
                totals[category.name] = totals.get(category.name, 0) + value
    return {k: round(v / 2**30, 3) for k, v in sorted(totals.items())} or None


def device_memory_peaks(root: Path | None = None, lnc: int = 2) -> dict[str, float] | None:
    """Each category's peak in GiB on the busiest *logical* core, or None without counters.

    The driver counts per physical core; a rank owns one logical core, which at LNC 2
    is two physical ones (logical core ``chip * 8 / lnc + core // lnc``), so a logical
    core's peak is the sum of its physical cores' peaks: an upper bound (the two need
    not peak at once), comparable with the plan's per-rank estimate.
    """
    per_logical: dict[tuple[int, str], int] = {}
    for (chip, core), folder in _core_counters(root or SYSFS_ROOT).items():
        logical = chip * (PHYSICAL_CORES_PER_CHIP // lnc) + core // lnc
        for category in folder.iterdir():
            value = _read_bytes(category / "peak")
            if value is not None:
                key = (logical, category.name)
                per_logical[key] = per_logical.get(key, 0) + value
    peaks: dict[str, int] = {}
    for (_, category), value in per_logical.items():
        peaks[category] = max(peaks.get(category, 0), value)
    return {name: round(b / 2**30, 3) for name, b in sorted(peaks.items())} or None


def device_memory_before_rung(root: Path | None = None) -> dict:
    """Before the 64-rank rung: the peaks reset where writable, else the totals held now."""
    root = root or SYSFS_ROOT
    before: dict = {"driver": neuron_driver_version(root), "peaks_reset": False}
    if reset_device_memory_peaks(root):
        before["peaks_reset"] = True
    else:
        before["totals_before_gib"] = device_memory_totals(root)
    return before


def device_memory_after_rung(before: dict, lnc: int, root: Path | None = None) -> dict:
    """What the device held during the rung, by category, per logical core; null with
    the reason where the driver shows no counters."""
    root = root or SYSFS_ROOT
    reading = {**before, "lnc": lnc}
    peaks = device_memory_peaks(root, lnc)
    reading["peak_gib_per_logical_core_by_category"] = peaks
    if peaks is None:
        reading["reason"] = (
            f"no device-memory counters under {root / NEURON_COUNTERS.split('/neuron*')[0]} "
            f"(driver {before.get('driver') or 'not loaded'}): not a trn2, or a driver whose "
            "sysfs tree moved them (Neuron 2.33 guide: driver 2.31 moved sysfs nodes)"
        )
    elif not before["peaks_reset"]:
        reading["totals_after_gib"] = device_memory_totals(root)
        reading["reason"] = (
            "peaks not reset (the counters are not writable here: run the ladder as root "
            "to reset them): they may be an earlier job's; totals before and after beside them"
        )
    return reading
