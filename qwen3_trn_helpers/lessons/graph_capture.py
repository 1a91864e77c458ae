"""Notebook 06 (graph capture): what dynamo captures, what inductor writes, eager vs compiled.

Small wrappers over PyTorch's own tools, so the notebook shows their output rather than
ours: ``torch._dynamo.explain`` (graphs and graph breaks), inductor's generated code
(``torch._inductor.utils.run_and_get_code``), and two real training runs through
``run(..., compile=True)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .plots import NotebookFigure


def capture_report(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """What dynamo captures of ``fn(*args)``: graphs, operators, and why it broke.

    A graph break is where dynamo stops capturing (a Python value it cannot trace, such
    as a tensor's value read back with ``.item()`` into an ``if``), runs that bit in
    Python and starts a new graph. ``torch.compile(fullgraph=True)``, as torchtitan
    compiles each block, turns any break into an error instead.
    """
    import torch

    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    return {
        "graphs": explained.graph_count,
        "graph breaks": explained.graph_break_count,
        "operators": explained.op_count,
        "break reasons": [str(b.reason).splitlines()[0] for b in explained.break_reasons],
    }


def inductor_code(fn: Callable[..., Any], *args: Any, lines: int = 40) -> str:
    """The first kernel inductor generates for ``fn(*args)`` (C++ on a CPU), ``lines`` long."""
    import torch
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, sources = run_and_get_code(torch.compile(fn, backend="inductor"), *args)
    torch._dynamo.reset()
    code = "\n".join(sources)
    # the kernel is the C++ source string inside the generated Python module
    match = re.search(r"cpp_fused\w*.*?'''(.*?)'''", code, re.S)
    body = match.group(1) if match else code
    return "\n".join(body.strip("\n").splitlines()[:lines])


def eager_vs_compiled(
    workdir: str | Path, variant: str = "native", steps: int = 8, **params: Any
) -> dict[str, list[float]]:
    """Step times (s) of the same run eager and with ``compile=True``, one after the other."""
    from ..runs.run import run

    workdir = Path(workdir)
    times = {}
    for label, compile_ in (("eager", False), ("compiled", True)):
        result = run(
            variant,
            steps=steps,
            compile=compile_,
            out=str(workdir / label),
            progress=False,
            **params,
        )
        times[label] = [m["step_time_s"] for m in result.metrics]
    return times


def step_time_figure(times: Mapping[str, Sequence[float]], *, title: str = "") -> NotebookFigure:
    """Step time per step, one line per run (log scale: the compile step dwarfs the rest)."""
    fig = NotebookFigure(figsize=(7, 3.6), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    for label, values in times.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (s, log scale)")
    ax.set_title(title or "Eager vs torch.compile: step time")
    ax.legend()
    return fig


def steady_state(values: Sequence[float], warmup: int = 3) -> float:
    """Median step time after the first ``warmup`` steps (compile and recompiles)."""
    import statistics

    return statistics.median(values[warmup:] if len(values) > warmup else values)


def compile_settings() -> list[dict[str, str]]:
    """What ``--compile`` sets here and on a trn2: backend, cache variable and folder."""
    from ..device import detect_device_type
    from ..training import compile as tc

    rows = []
    for where, device in (("here", detect_device_type()), ("trn2", "neuron")):
        var, folder = (
            (tc.NEFF_CACHE_VAR, tc.neff_cache_dir())
            if device == "neuron"
            else (tc.INDUCTOR_CACHE_VAR, tc.inductor_cache_dir())
        )
        rows.append(
            {
                "where": where,
                "device": device,
                "backend": tc.compile_backend(device),
                "compiled": ", ".join(tc.COMPONENTS),
                "cache variable": var,
                "default cache folder": str(folder).replace(str(Path.home()), "~"),
            }
        )
    return rows
