"""An ipywidgets panel: pick a variant, an init and a step count, press Run, watch the loss.

All the logic is here (tested by driving the widgets from Python: ``panel.run_button
.click()``); the notebook cell only displays the panel. The plot is an ``Image`` widget
re-rendered after every step, so no ``clear_output`` juggling is needed. Each run is
drawn over the runs before it (random vs pretrained, one variant vs another), so the
plot compares them; re-run the cell for an empty plot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as w

from ..errors import Qwen3TrnError
from ..model.shapes import VOCAB_SIZE
from ..model.variants import VARIANTS


def render_png(
    records: list[dict[str, Any]],
    title: str,
    earlier: dict[str, list[dict[str, Any]]] | None = None,
) -> bytes:
    """The running curve (``title``) drawn over the finished runs in ``earlier``."""
    from .plots import loss_figure

    curves = {**(earlier or {}), title: records}
    return loss_figure(curves, ln_vocab=math.log(VOCAB_SIZE), title=title)._repr_png_()


class TrainingPanel:
    """Widgets + the callback that trains with :func:`qwen3_trn_helpers.run`."""

    def __init__(self, out_root: str | Path = "runs/panel", run_fn: Callable | None = None):
        from ..runs.run import run

        self.run_fn = run_fn or run
        self.out_root = Path(out_root)
        self.variant = w.Dropdown(options=list(VARIANTS), value="native", description="variant")
        self.init = w.ToggleButtons(
            options=["random", "pretrained"], value="random", description="init"
        )
        self.steps = w.IntSlider(value=10, min=1, max=50, description="steps")
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.progress = w.IntProgress(value=0, min=0, max=10, description="step 0")
        self.status = w.HTML(value="Press <b>Run</b> to train.")
        self.plot = w.Image(
            value=render_png([], "no run yet"), format="png", layout=w.Layout(width="640px")
        )
        self.results: list[Any] = []
        # finished runs' curves (label -> records): every later plot overlays them
        self.curves: dict[str, list[dict[str, Any]]] = {}
        self.run_button.on_click(self._on_click)
        self.widget = w.VBox(
            [
                w.HBox([self.variant, self.steps]),
                self.init,
                w.HBox([self.run_button, self.progress]),
                self.status,
                self.plot,
            ]
        )

    def _on_step(self, records: list[dict[str, Any]], title: str, record: dict[str, Any]):
        records.append(record)
        self.progress.value = record["step"]
        self.progress.description = f"step {record['step']}"
        self.status.value = f"step {record['step']}: loss <b>{record['loss']:.3f}</b>"
        self.plot.value = render_png(records, title, self.curves)

    def _on_click(self, _button: w.Button | None = None) -> None:
        variant, init, steps = self.variant.value, self.init.value, self.steps.value
        title = f"run {len(self.results) + 1}: {variant}, {init} init, {steps} steps"
        records: list[dict[str, Any]] = []
        self.run_button.disabled = True
        self.progress.max, self.progress.value = steps, 0
        self.status.value = f"training {title} for {steps} steps..."
        if init == "pretrained":
            self.status.value += " (first time on CPU: making the local checkpoint, ~2 min)"
        out = self.out_root / f"{len(self.results) + 1:02d}-{variant}-{init}"
        try:
            result = self.run_fn(
                variant,
                init=init,
                steps=steps,
                local_batch_size=1,
                out=out,
                overwrite=True,
                progress=False,
                on_step=lambda r: self._on_step(records, title, r),
            )
        except Qwen3TrnError as e:
            self.status.value = f"<span style='color:#b00'>error: {e}</span>"
            return
        finally:
            self.run_button.disabled = False
        self.results.append(result)
        self.curves[title] = records
        self.status.value = (
            f"done: {len(result.metrics)} steps, loss {result.losses[0]:.3f} -> "
            f"{result.losses[-1]:.3f} ({result.wall_s:.1f} s); metrics in {result.metrics_path}"
        )

    #: what a page without a kernel shows instead of the live panel
    STAND_IN = (
        "The training panel: a live widget (a variant, an initialisation and a number "
        "of steps to choose, a Run button, a progress bar and the loss plotted after "
        "every step). It needs a running kernel: open this notebook in JupyterLab to use "
        "it. The figure of section 2 shows the same two runs, random and pretrained."
    )

    def _repr_mimebundle_(self, **kwargs: Any):
        """The widget for Jupyter; beside it a text stand-in for a front end without
        the widget's state (the static site), which would otherwise show a blank or
        the bare ``VBox(...)`` of the widget's text form."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/plain"] = self.STAND_IN
        bundle["text/html"] = f"<p><em>{self.STAND_IN}</em></p>"
        return bundle
