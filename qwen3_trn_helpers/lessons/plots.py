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
    difference: bool = False,
    caption: str | None = None,
):
    """One line per run (label -> metrics records); optional step-1 reference points.

    ``caption``: a line of text under the plot (what a reader should take from it, with
    its numbers), kept inside the saved PNG so the picture says it without the terminal.

    ``difference=True`` (exactly two curves) adds a panel below with the second curve
    minus the first, step by step: two runs that agree to 1e-4 draw one line on top of
    the other, and only their difference shows that both are there. Later curves are
    drawn dashed over earlier ones for the same reason.

    Uses ``matplotlib.figure.Figure`` directly (no pyplot state), so it works the same in
    a notebook, a script and a test, and repeated calls do not leak figures.
    """
    if difference and len(curves) != 2:
        raise ValueError(f"difference=True needs exactly two curves, got {len(curves)}")
    fig = _figure()
    if difference:
        ax, diff_ax = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1.3))
    else:
        ax = fig.add_subplot()
    colors = []
    for i, (label, records) in enumerate(curves.items()):
        steps = [r["step"] for r in records]
        losses = [r["loss"] for r in records]
        (line,) = ax.plot(
            steps,
            losses,
            marker="o" if i == 0 else "x",
            markersize=4 if i == 0 else 7,
            linestyle="-" if i == 0 else "--",
            label=label,
        )
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
    ax.set_ylabel("loss (cross-entropy, nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if difference:
        (a_label, a), (b_label, b) = curves.items()
        by_step = {r["step"]: r["loss"] for r in a}
        pairs = [(r["step"], r["loss"] - by_step[r["step"]]) for r in b if r["step"] in by_step]
        diff_ax.axhline(0, color="grey", linewidth=0.8)
        diff_ax.plot(
            [s for s, _ in pairs], [d for _, d in pairs], marker="o", markersize=4, color="black"
        )
        diff_ax.set_ylabel("difference")
        diff_ax.set_title(f"{b_label}  minus  {a_label}", fontsize="small")
        diff_ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        diff_ax.grid(alpha=0.3)
        diff_ax.set_xlabel("step")
    else:
        ax.set_xlabel("step")
    if caption:
        fig.supxlabel(caption, fontsize="small", wrap=True)
    return fig


def save_loss_plot(
    curves: Mapping[str, Sequence[dict[str, Any]]], path: str | Path, **kwargs: Any
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    loss_figure(curves, **kwargs).savefig(path)
    return path
