"""Notebook 06's counts and timings: what eager mode dispatches, what dynamo's op_count
leaves out, and the minimum over repeated runs the figure plots."""

from __future__ import annotations

import os

import torch

from qwen3_trn_helpers.lessons.graph_capture import StepTimes, capture_report, eager_ops


def rms_silu(x, weight):
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return torch.nn.functional.silu(normed * weight)


def test_eager_dispatches_seven_operators_and_dynamo_counts_five():
    """7 ATen operators (6 intermediates); dynamo's op_count counts call_function nodes
    only, so the two method calls (x.pow, .mean) are missing from its 5."""
    x, weight = torch.randn(8, 128), torch.randn(128)
    assert eager_ops(rms_silu, x, weight) == ["pow", "mean", "add", "rsqrt", "mul", "mul", "silu"]
    report = capture_report(rms_silu, x, weight)
    assert (report["graphs"], report["operators"]) == (1, 5)
    assert (report["graph calls"], report["of them methods"]) == (7, 2)


def test_step_times_keep_each_steps_minimum_and_the_load():
    times = StepTimes(
        runs={"eager": [[3.0, 1.0, 1.5], [2.5, 1.2, 1.1]], "compiled": [[40.0, 0.5], [5.0, 0.7]]},
        load=[(9.0, 8.0, 7.0), (11.0, 9.0, 8.0)],
    )
    assert times.minimum == {"eager": [2.5, 1.0, 1.1], "compiled": [5.0, 0.5]}
    assert times.first_steps("compiled") == [40.0, 5.0]
    line = times.load_line()
    assert "9.0 before, 11.0 after" in line and f"{os.cpu_count()} cores" in line
