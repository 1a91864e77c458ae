"""The software stack of the course, drawn by code (notebook 01 and the instructor's kit).

One picture of who does what, from PyTorch's dispatcher up to the launcher: a box per
layer, what it contributes, and the notebook that teaches it. Drawn with matplotlib, so
the figure in the kit (``notebooks/figures/stack.png``) is regenerated from here
(``python -m qwen3_trn_helpers.lessons.stack_diagram notebooks/figures/stack.png``) and a test
checks that the committed file still matches.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: bottom to top: (layer, what it does here, the notebook that teaches it, colour)
LAYERS = (
    ("PyTorch 2.14 (torch)",
     "tensors, autograd, the dispatcher: every op is routed by its tensors' dispatch key",
     "01", "#0072B2"),
    ("PrivateUse1  ->  torch-neuronx",
     "the out-of-tree device key; TorchNeuron names it 'neuron', compiles ops to NEFFs,\n"
     "falls back to the CPU for the rest (our toy device: the same routes, in Python)",
     "01", "#E69F00"),
    ("torchtitan 0.3.0",
     "Trainer.Config, the models (native Qwen3, HF backend), FSDP / TP, checkpointer",
     "02, 03", "#009E73"),
    ("qwen3_trn_helpers: our config registry",
     "the three variants and presets as torchtitan configs, named patches, run()",
     "02, 03", "#CC79A7"),
    ("torchrun and the device mesh",
     "one process (rank) per NeuronCore; ranks as a grid: FSDP 16 x TP 4, x nodes",
     "04, 05", "#56B4E9"),
)  # fmt: skip


def stack_figure():
    """The stack as boxes, bottom (torch) to top (the launcher), with arrows between."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    from .plots import NotebookFigure

    fig = NotebookFigure(figsize=(8.5, 5.6), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.axis("off")
    height, gap, bottom = 14.0, 4.5, 3.0
    ax.text(50, 97, "The course's stack: each layer calls the one below it", fontsize=12,
            ha="center", va="center", weight="bold")  # fmt: skip
    for i, (name, role, notebooks, colour) in enumerate(LAYERS):
        y = bottom + i * (height + gap)
        box = FancyBboxPatch((4, y), 92, height, boxstyle="round,pad=0,rounding_size=2",
                             facecolor=colour, alpha=0.22, edgecolor=colour, lw=2)  # fmt: skip
        ax.add_patch(box)
        ax.text(7, y + height - 3.2, name, fontsize=11, weight="bold", va="center")
        ax.text(7, y + height / 2 - 2.2, role, fontsize=8.5, va="center", linespacing=1.3)
        ax.text(94, y + height - 3.2, f"notebook {notebooks}", fontsize=8, ha="right",
                va="center", style="italic")  # fmt: skip
        if i:
            ax.add_patch(FancyArrowPatch((50, y - gap + 0.3), (50, y - 0.3), arrowstyle="<-",
                                         mutation_scale=12, color="#333333"))  # fmt: skip
    return fig


def save_stack_figure(path: Path) -> Path:
    """Write the figure as PNG without a timestamp or version in its metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stack_figure().savefig(path, format="png", metadata={"Software": None})
    return path


if __name__ == "__main__":
    print(save_stack_figure(Path(sys.argv[1] if len(sys.argv) > 1 else "stack.png")))
