"""Loss curves with matplotlib, saved as PNG and shown inline in notebooks (no pyplot)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure


class NotebookFigure(Figure):
    """A Figure that shows itself as PNG in Jupyter without pyplot.

    IPython registers its matplotlib formatter only once pyplot is imported; these
    figures never touch pyplot's global state, so they bring their own PNG repr.
    """

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png")
        return buf.getvalue()


def _figure() -> NotebookFigure:
    return NotebookFigure(figsize=(7, 4), dpi=110, layout="constrained")


def loss_figure(
    curves: Mapping[str, Sequence[dict[str, Any]]],
    *,
    title: str = "Training loss",
    reference: Mapping[str, float] | None = None,
    ln_vocab: float | None = None,
):
    """One line per run (label -> metrics records); optional step-1 reference points.

    Uses ``matplotlib.figure.Figure`` directly (no pyplot state), so it works the same in
    a notebook, a script and a test, and repeated calls do not leak figures.
    """
    fig = _figure()
    ax = fig.add_subplot()
    colors = []
    for label, records in curves.items():
        steps = [r["step"] for r in records]
        losses = [r["loss"] for r in records]
        (line,) = ax.plot(steps, losses, marker="o", markersize=3, label=label)
        colors.append(line.get_color())
    # The i-th reference point (a step-1 loss) takes the i-th curve's colour.
    for i, (label, value) in enumerate((reference or {}).items()):
        color = colors[i] if i < len(colors) else None
        ax.plot(
            [1],
            [value],
            marker="*",
            markersize=13,
            linestyle="none",
            label=label,
            color=color,
            markeredgecolor="black",
        )
    if ln_vocab is not None:
        ax.axhline(
            ln_vocab, color="grey", linestyle=":", linewidth=1, label=f"ln(vocab) = {ln_vocab:.2f}"
        )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("loss (cross-entropy, nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def save_loss_plot(
    curves: Mapping[str, Sequence[dict[str, Any]]], path: str | Path, **kwargs: Any
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    loss_figure(curves, **kwargs).savefig(path)
    return path
