"""Issue 45, item 4: each torch-neuronx refusal and soft failure of a reading, as a user
meets it: one line with the fix, or a null with a reason and the run going on."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from qwen3_trn_helpers.training import metrics
from qwen3_trn_helpers.training.neuron_faults import FAULTS, neuron_fault

#: what torch-neuronx raises, word for word from its source (NeuronDevice.cpp:198-207,
#: distributed/backend.py:293-295, :310-312, NeuronCompiler.cpp:178-190, FileLock.cpp:91-93)
RAISED = [
    ValueError("Attempted to access device that doesn't attach to this process, received 0 "
               "expected to be equal or greater than 1"),
    ValueError("Device index 2 is out of range. Valid range is 0 to 1"),
    AssertionError("Neuron runtime should not be initialized before the init_process_group."),
    AssertionError("Attempted to have more than one device per process in distributed setup"),
    RuntimeError("Command failed (neuronx-cc compilation) with exit code 127"),
    RuntimeError("Failed to open lock file: /tmp/local_cache/locks/ab.lock (Permission denied)"),
]  # fmt: skip


@pytest.mark.parametrize("error", RAISED, ids=lambda e: str(e)[:30])
def test_each_refusal_is_one_line_with_its_fix(error):
    try:
        raise RuntimeError("torchtitan's wrapping") from error  # found down the chain too
    except RuntimeError as wrapped:
        line = neuron_fault(wrapped)
    assert line is not None and "\n" not in line
    assert line.startswith("torch-neuronx: ") and str(error).split(".")[0][:40] in line
    fix = next(f for words, f in FAULTS if words in str(error))
    assert line.endswith(fix)


def test_other_errors_are_not_torch_neuronxs():
    assert neuron_fault(RuntimeError("CUDA out of memory")) is None


class _Module:
    """torch.neuron as a rank past local rank 0 sees it (N11): capacity 0, and a
    memory_stats that may fail."""

    def __init__(self, total: int, stats_fail: bool = False):
        self.total, self.stats_fail = total, stats_fail

    def get_device_properties(self, device):
        return SimpleNamespace(total_memory=self.total)

    def reset_peak_memory_stats(self, device=None):
        pass

    def memory_stats(self, device=None):
        if self.stats_fail:
            raise RuntimeError("runtime not reachable")
        entry = {"current": 2**30, "peak": 2**30}
        return {"allocated_bytes": entry, "reserved_bytes": {"peak": 0}, "active_bytes": entry}


def test_a_capacity_of_0_leaves_percentages_out_and_the_run_going(monkeypatch):
    """N11: torchtitan divided the peak by torch-neuronx's total_memory of 0."""
    import torchtitan.tools.utils as tt_utils

    monkeypatch.setattr(tt_utils, "device_module", _Module(0))
    monitor = metrics.NeuronMemoryMonitor("privateuseone:1")  # (neuron unregistered here)
    stats = monitor.get_peak_stats()
    assert stats.max_active_gib == 1.0 and math.isnan(stats.max_active_pct)
    assert "total_memory 0" in monitor.note and "percentages are left out" in monitor.note


def test_failing_statistics_are_null_with_a_reason(monkeypatch, tmp_path):
    import torchtitan.tools.utils as tt_utils

    monkeypatch.setattr(tt_utils, "device_module", _Module(24 * 2**30, stats_fail=True))
    monitor = metrics.NeuronMemoryMonitor("privateuseone:1")  # (neuron unregistered here)
    stats = monitor.get_peak_stats()
    assert math.isnan(stats.max_reserved_gib) and "memory_stats failed" in monitor.note
    logger = metrics.JsonlMetricsLogger(tmp_path / "metrics.jsonl")
    logger.memory_note = lambda: monitor.note
    logger.log({"loss_metrics/global_avg_loss": 3.0, "memory/max_reserved(GiB)": float("nan")}, 1)
    logger.close()
    import json

    record = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert record["memory_gib"] is None and "memory_stats failed" in record["memory_note"]
