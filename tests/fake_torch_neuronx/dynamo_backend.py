"""The ``neuron`` dynamo backend: refuses symbolic sizes, caches a NEFF per graph under
its lock, counts graphs and graph breaks, then runs the graph with ``aot_eager``.

torch-neuronx's backend lowers each captured graph through StableHLO to neuronx-cc; the
double does no lowering. It keeps what decides whether our code can compile at all:
``preprocess_graph``'s dynamic-shape analysis at entry raises "torch-neuronx requires
static shapes" on any ShapeEnv symbol (AWS's torch.compile reference lists dynamic
shapes as unsupported), and a compile failure raises (Neuron 2.33:
TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1 by default, no eager fallback).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from . import neff_cache

#: what this process's backend saw: graphs compiled, dynamo's graph breaks at the last one
SEEN = {"graphs": 0, "refused": 0, "graph_breaks": 0}

STATIC_SHAPES_MESSAGE = "torch-neuronx requires static shapes"


def symbolic_sizes(gm: torch.fx.GraphModule, example_inputs) -> list[str]:
    """Where the graph holds a ShapeEnv symbol: a SymInt input, or a tensor whose
    shape or strides hold one."""
    found = []

    def look(where: str, value) -> None:
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            found.append(f"{where}: {value}")
        elif isinstance(value, torch.Tensor):
            sizes = [*value.shape, *(value.stride() if value.layout == torch.strided else ())]
            symbols = [s for s in sizes if isinstance(s, torch.SymInt)]
            if symbols:
                found.append(f"{where}: shape {tuple(value.shape)}")

    for node in gm.graph.nodes:
        look(node.name, node.meta.get("example_value", node.meta.get("val")))
    for i, value in enumerate(example_inputs):
        look(f"input {i}", value)
    return found


def _record() -> None:
    folder = os.environ.get("FAKE_TORCH_NEURONX_RECORD")
    if folder:
        Path(folder, f"dynamo-{os.getpid()}.json").write_text(json.dumps(SEEN))


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The entry point ``neuron`` of group ``torch_dynamo_backends``."""
    from torch._dynamo.backends.registry import lookup_backend
    from torch._dynamo.utils import counters

    symbols = symbolic_sizes(gm, example_inputs)
    if symbols:
        SEEN["refused"] += 1
        _record()
        raise RuntimeError(
            f"{STATIC_SHAPES_MESSAGE} (fake_torch_neuronx: {len(symbols)} symbolic "
            f"size(s), first {symbols[0]})"
        )
    SEEN["graphs"] += 1
    SEEN["graph_breaks"] = sum(counters["graph_break"].values())
    neff_cache.compile_into_cache(gm, example_inputs)
    _record()
    return lookup_backend("aot_eager")(gm, example_inputs)
