"""Notebook 06 (graph capture): what dynamo captures, what inductor writes, eager vs compiled.

Small wrappers over PyTorch's own tools, so the notebook shows their output rather than
ours: ``torch._dynamo.explain`` (graphs and graph breaks), inductor's generated code
(``torch._inductor.utils.run_and_get_code``), and two real training runs through
``run(..., compile=True)``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .plots import NotebookFigure


class _NoCudaRuntimeNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found")


def quiet_cuda_home_note() -> None:
    """Drop one message: ``torch.utils.cpp_extension`` logs "No CUDA runtime is found,
    using CUDA_HOME=..." when it is first imported (as inductor's C++ backend imports
    it) on a machine with a CUDA toolkit (``nvcc`` on PATH) and no GPU. True, and nothing
    a CPU course needs, yet it showed on stderr under notebook 06's first compile; every
    other message of that logger is kept."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _NoCudaRuntimeNote) for f in logger.filters):
        logger.addFilter(_NoCudaRuntimeNote())


def capture_report(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """What dynamo captures of ``fn(*args)``: graphs, operators, and why it broke.

    ``operators`` is dynamo's own ``op_count``, which counts only the graph's
    ``call_function`` nodes (torch 2.14, ``torch/_dynamo/backends/debugging.py``,
    ``_explain_graph_detail``): a method call such as ``x.pow(2)`` or ``.mean(-1)`` is
    recorded as a ``call_method`` node and left out. ``graph calls`` counts both, every
    operation the graphs hold.

    A graph break is where dynamo stops capturing (a Python value it cannot trace, such
    as a tensor's value read back with ``.item()`` into an ``if``), runs that bit in
    Python and starts a new graph. ``torch.compile(fullgraph=True)``, as torchtitan
    compiles each block, turns any break into an error instead.
    """
    import torch

    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    calls = [
        node.op
        for graph in explained.graphs
        for node in graph.graph.nodes
        if node.op in ("call_function", "call_method")
    ]
    return {
        "graphs": explained.graph_count,
        "graph breaks": explained.graph_break_count,
        "operators": explained.op_count,
        "graph calls": len(calls),
        "of them methods": calls.count("call_method"),
        "break reasons": [str(b.reason).splitlines()[0] for b in explained.break_reasons],
    }


def eager_ops(fn: Callable[..., Any], *args: Any) -> list[str]:
    """The ATen operators ``fn(*args)`` dispatches in eager mode, in order.

    What eager execution costs: each one is a kernel launch that writes its result to
    memory, so n operators leave n - 1 intermediate tensors besides the output. Recorded
    with a ``TorchDispatchMode``, PyTorch's hook below autograd where every operator
    passes once."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            self.ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Record() as record:
        fn(*args)
    return record.ops


def inductor_code(fn: Callable[..., Any], *args: Any, lines: int = 40) -> str:
    """The first kernel inductor generates for ``fn(*args)`` (C++ on a CPU), ``lines`` long."""
    import torch

    quiet_cuda_home_note()  # before inductor imports torch.utils.cpp_extension
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, sources = run_and_get_code(torch.compile(fn, backend="inductor"), *args)
    torch._dynamo.reset()
    code = "\n".join(sources)
    # the kernel is the C++ source string inside the generated Python module
    match = re.search(r"cpp_fused\w*.*?'''(.*?)'''", code, re.S)
    body = match.group(1) if match else code
    return "\n".join(body.strip("\n").splitlines()[:lines])


@dataclass
class StepTimes:
    """Step times (s) of repeated runs, per label, and the machine's load around them.

    ``runs[label]`` holds one list per repeat. The figure and the steady state use each
    step's minimum over the repeats: on a shared machine another process can only make
    a step slower, never faster, so the minimum is the best estimate of the step itself.
    The first steps are kept per run: the first compiled run pays the compile, a later
    one reads inductor's cache from disk."""

    runs: dict[str, list[list[float]]] = field(default_factory=dict)
    load: list[tuple[float, float, float]] = field(default_factory=list)

    @property
    def minimum(self) -> dict[str, list[float]]:
        return {
            label: [min(step) for step in zip(*runs, strict=True)]
            for label, runs in self.runs.items()
        }

    def first_steps(self, label: str) -> list[float]:
        return [run[0] for run in self.runs[label]]

    def load_line(self) -> str:
        """The 1-minute load average before and after, against this machine's cores."""
        before, after = self.load[0][0], self.load[-1][0]
        return (
            f"load average (1 min) {before:.1f} before, {after:.1f} after, on "
            f"{os.cpu_count()} cores: above the core count, other processes shared the CPU "
            "and slowed some steps"
        )


def eager_vs_compiled(
    workdir: str | Path, variant: str = "native", steps: int = 8, repeats: int = 2, **params: Any
) -> StepTimes:
    """The same run eager and with ``compile=True``, alternated ``repeats`` times.

    Alternating (eager, compiled, eager, compiled) spreads a burst of load over both
    labels instead of one. Each run builds its model anew, so the second compiled run is
    traced again by dynamo, but inductor finds the generated code in its cache, which is
    on disk (a kernel restart keeps it)."""
    from ..runs.run import run

    quiet_cuda_home_note()
    workdir = Path(workdir)
    times = StepTimes(load=[os.getloadavg()])
    for repeat in range(repeats):
        for label, compile_ in (("eager", False), ("compiled", True)):
            result = run(
                variant,
                steps=steps,
                compile=compile_,
                out=str(workdir / f"{label}-{repeat + 1}"),
                progress=False,
                **params,
            )
            times.runs.setdefault(label, []).append([m["step_time_s"] for m in result.metrics])
    times.load.append(os.getloadavg())
    return times


#: where the step-time axis may put a tick, in seconds (a log axis labelled in plain numbers)
SECOND_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def step_time_figure(times: StepTimes, *, title: str = "") -> NotebookFigure:
    """Step time per step, one line per run: a colour per label, run 1 solid, run 2
    dashed, each compiled run's first step labelled with its seconds.

    Every run is drawn, not a minimum over runs: the minimum of a cold and a warm run
    puts the warm run's first step where the cold compile was, and hides the compile
    the figure is there to show. The axis is logarithmic (a compile of tens of seconds
    and steady steps of a fraction of one share it), its ticks in plain seconds (0.5, 1,
    5, 20) rather than powers of ten."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig = NotebookFigure(figsize=(7, 3.8), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    styles = ("-", "--", ":", "-.")
    values = []
    for color, (label, runs) in enumerate(times.runs.items()):
        for r, run in enumerate(runs):
            values += run
            ax.plot(range(1, len(run) + 1), run, marker="o", markersize=4,
                    linestyle=styles[r % len(styles)], color=f"C{color}",
                    label=f"{label}, run {r + 1}")  # fmt: skip
            if label == "compiled":
                ax.annotate(f"run {r + 1}: {run[0]:.1f} s", (1, run[0]), xytext=(8, -4 - 10 * r),
                            textcoords="offset points", fontsize=8, color=f"C{color}")  # fmt: skip
    ax.set_yscale("log")
    low, high = min(values), max(values)
    ticks = [t for t in SECOND_TICKS if low / 1.6 <= t <= high * 1.6] or [low, high]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("step")
    ax.set_ylabel("step time (seconds, log scale)")
    ax.set_title(title or "Eager vs torch.compile: step time of each run")
    ax.legend(fontsize=8)
    return fig


def steady_state(values: Sequence[float], warmup: int = 3) -> float:
    """Median step time after the first ``warmup`` steps (compile and recompiles)."""
    import statistics

    return statistics.median(values[warmup:] if len(values) > warmup else values)


def compile_settings() -> list[dict[str, str]]:
    """What ``--compile`` sets here and on a trn2: backend, cache variable and folder."""
    from ..device import DEVICES, resolve
    from ..training import compile as tc

    rows = []
    for where, device in (("here", resolve()), ("trn2", DEVICES["neuron"])):
        var, folder = (
            (tc.NEFF_CACHE_VAR, tc.neff_cache_dir())
            if device.is_trn2
            else (tc.INDUCTOR_CACHE_VAR, tc.inductor_cache_dir())
        )
        rows.append(
            {
                "where": where,
                "device": device.type,
                "backend": device.compile_backend,
                "compiled": ", ".join(tc.COMPONENTS),
                "cache variable": var,
                "default cache folder": str(folder).replace(str(Path.home()), "~"),
            }
        )
    return rows
