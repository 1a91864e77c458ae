"""Notebook 06's counts and timings: what eager mode dispatches, what dynamo's op_count
leaves out, the repeated runs the figure draws, and a CUDA note dropped from its stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
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


def test_the_figure_draws_every_run_in_plain_seconds():
    """Run 1 and run 2 as separate lines, so a cold compile (40 s) is not hidden behind a
    warm run's first step (5 s), as each step's minimum would hide it; the log axis is
    labelled in plain seconds, not "4 x 10^1"."""
    from qwen3_trn_helpers.lessons.graph_capture import step_time_figure

    times = StepTimes(
        runs={
            "eager": [[3.0, 1.0, 1.5], [2.5, 1.2, 1.1]],
            "compiled": [[40.0, 0.5, 0.6], [5.0, 0.7, 0.5]],
        },  # fmt: skip
    )
    fig = step_time_figure(times)
    ax = fig.axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines == {
        "eager, run 1": [3.0, 1.0, 1.5],
        "eager, run 2": [2.5, 1.2, 1.1],
        "compiled, run 1": [40.0, 0.5, 0.6],
        "compiled, run 2": [5.0, 0.7, 0.5],
    }
    styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
    assert styles["compiled, run 1"] == "-" and styles["compiled, run 2"] == "--"
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["0.5", "1", "2", "5", "10", "20", "50"]
    assert ax.get_yscale() == "log"
    notes = [t.get_text() for t in ax.texts]
    assert notes == ["run 1: 40.0 s", "run 2: 5.0 s"]  # the compiled runs' first steps
    assert fig._repr_png_().startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [False, True])
def test_no_cuda_runtime_note_is_dropped_from_notebook_06(tmp_path, quiet):
    """A CPU machine with a CUDA toolkit (nvcc on PATH) and no GPU: importing
    torch.utils.cpp_extension, as inductor's C++ backend does, logs "No CUDA runtime is
    found" on stderr; the lesson drops that one message (and only with it does it go)."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\nexit 0\n")
    nvcc.chmod(0o755)
    env = {**os.environ, "PATH": f"{nvcc.parent}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    code = (
        "from qwen3_trn_helpers.lessons.graph_capture import quiet_cuda_home_note\n"
        + ("quiet_cuda_home_note()\n" if quiet else "")
        + "import torch.utils.cpp_extension\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert ("No CUDA runtime is found" in done.stderr) is not quiet, done.stderr
