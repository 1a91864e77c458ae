"""The course's pictures: legible, and the committed ones still what the code draws."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def memory_fig():
    """Notebook 04's memory figure, with its five estimates (arithmetic only)."""
    from qwen3_trn_helpers.lessons import memory_figure, trn2_plan

    plan_4b, plan_moe = trn2_plan("native"), trn2_plan("nki_moe")
    no_ac = dataclasses.replace(plan_moe.preset, activation_checkpoint="none")
    fp32 = dataclasses.replace(plan_moe.preset, reduce_dtype="float32")
    estimates = {
        "4b\nTP 4 x FSDP 16": plan_4b.memory(lnc=2),
        "4b, document mask\n(generic attention)": dataclasses.replace(
            plan_4b, attention="document"
        ).memory(lnc=2),
        "30b-a3b\nFSDP 64, full AC": plan_moe.memory(lnc=2),
        "30b-a3b\nfp32 reduction": dataclasses.replace(plan_moe, preset=fp32).memory(lnc=2),
        "30b-a3b\nno AC": dataclasses.replace(plan_moe, preset=no_ac).memory(lnc=2),
    }
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = memory_figure(estimates, measured={"4b\nTP 4 x FSDP 16": 0.93})
    FigureCanvasAgg(fig).draw()  # lays the labels out as the PNG shows them
    return fig


def test_memory_figure_gives_every_term_its_own_colour(memory_fig):
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    ax = memory_fig.axes[0]
    handles, labels = ax.get_legend_handles_labels()
    colours = {
        label: to_hex(h.patches[0].get_facecolor() if hasattr(h, "patches") else h)
        for h, label in zip(handles, labels, strict=True)
        if hasattr(h, "patches") and isinstance(h.patches[0], Rectangle)
    }
    assert {"params", "Neuron runtime", "activations", "logits"} <= set(colours)
    assert len(set(colours.values())) == len(colours), colours  # no two terms share one


def test_memory_figure_bar_labels_do_not_overlap(memory_fig):
    ax = memory_fig.axes[0]
    renderer = memory_fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
    assert len(boxes) == 5
    for left, right in zip(boxes[:-1], boxes[1:], strict=True):
        assert left.x1 < right.x0, "neighbouring bar labels overlap"


def test_stack_figure_in_the_kit_is_what_the_code_draws(tmp_path):
    """notebooks/figures/stack.png is regenerated, not edited: it must match the code
    (python -m qwen3_trn_helpers.lessons.stack_diagram notebooks/figures/stack.png)."""
    from matplotlib.testing.compare import compare_images

    from qwen3_trn_helpers.lessons.stack_diagram import LAYERS, save_stack_figure

    fresh = save_stack_figure(tmp_path / "stack.png")
    committed = ROOT / "notebooks" / "figures" / "stack.png"
    assert compare_images(str(committed), str(fresh), tol=2) is None
    names = [name for name, *_ in LAYERS]
    assert names[0].startswith("PyTorch") and "PrivateUse1" in names[1]
    assert names[-1].startswith("torchrun")
