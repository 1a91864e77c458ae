"""Each patch: still needed (fails once upstream fixes it), works, and is idempotent."""

import importlib.metadata

import pytest
import torch

from qwen3_trn_helpers import patches

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="patch applies without a GPU")


def test_written_for_this_torchtitan():
    assert importlib.metadata.version("torchtitan").startswith(patches.TESTED_TORCHTITAN)


@cpu_only
def test_cpu_device_patch_is_still_needed():
    # If this fails, torchtitan no longer falls back to "cuda" on a CPU host:
    # delete patch_cpu_device and CpuDeviceModule.
    assert patches.torchtitan_picks_cuda_without_gpu()


@cpu_only
def test_cpu_device_patch_reaches_every_copy_and_is_idempotent():
    patches.apply_cpu_patches()
    import torchtitan.components.metrics as metrics
    import torchtitan.distributed.utils as dist_utils
    import torchtitan.tools.utils as tt_utils

    for module in (tt_utils, metrics, dist_utils):
        assert module.device_type == "cpu"
        assert module.device_module is patches.CPU_DEVICE_MODULE
    assert patches.patch_cpu_device() == []  # second call: nothing left to change


@cpu_only
def test_torchtitan_memory_monitor_runs_on_cpu_module():
    patches.apply_cpu_patches()
    from torchtitan.components.metrics import DeviceMemoryMonitor

    monitor = DeviceMemoryMonitor("cpu")
    stats = monitor.get_peak_stats()
    assert 0 < stats.max_reserved_gib < monitor.device_capacity_gib
