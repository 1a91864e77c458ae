"""The interactive panel's callback, driven through its widgets as a user would."""

import pytest

from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.lessons.panel import TrainingPanel
from qwen3_trn_helpers.lessons.reproduction import INITS
from qwen3_trn_helpers.model.variants import VARIANTS

PNG = b"\x89PNG\r\n\x1a\n"


def test_run_button_trains_and_updates_widgets(tmp_path):
    panel = TrainingPanel(out_root=tmp_path)
    panel.steps.value = 2
    seen_progress = []
    panel.progress.observe(lambda change: seen_progress.append(change["new"]), "value")
    panel.run_button.click()
    assert seen_progress[-2:] == [1, 2]  # one update per completed step, live
    assert panel.progress.value == panel.progress.max == 2
    assert bytes(panel.plot.value).startswith(PNG)
    assert panel.status.value.startswith("done: 2 steps")
    assert not panel.run_button.disabled
    (result,) = panel.results
    assert result.metrics_path.exists() and len(result.losses) == 2
    panel.variant.value = "nki_moe"  # a second run in the same kernel, another variant
    panel.steps.value = 1
    panel.run_button.click()
    assert len(panel.results) == 2 and panel.results[1].spec.variant == "nki_moe"
    # both finished runs are kept for the plot: the second was drawn over the first
    assert list(panel.curves) == [
        "run 1: native, random init, 2 steps",
        "run 2: nki_moe, random init, 1 steps",
    ]
    assert [len(r) for r in panel.curves.values()] == [2, 1]


def test_difference_panel_needs_two_curves():
    from qwen3_trn_helpers.lessons.plots import loss_figure

    a = [{"step": 1, "loss": 12.0}, {"step": 2, "loss": 11.0}]
    b = [{"step": 1, "loss": 12.0001}, {"step": 2, "loss": 11.0}]
    fig = loss_figure({"a": a, "b": b}, difference=True)
    assert len(fig.axes) == 2 and fig._repr_png_().startswith(PNG)
    with pytest.raises(ValueError, match="exactly two curves"):
        loss_figure({"a": a}, difference=True)


def test_errors_show_in_the_panel_and_release_the_button(tmp_path):
    message = "steps must be a positive integer, got 0"
    calls = []

    def failing_run(variant, **kwargs):  # what the panel shows while the run is going
        calls.append((variant, kwargs["steps"], panel.run_button.disabled, panel.status.value))
        raise ConfigError(message)

    panel = TrainingPanel(out_root=tmp_path, run_fn=failing_run)
    empty_plot = panel.plot.value
    panel.steps.value = 3
    panel.run_button.click()
    ((variant, steps, held, running),) = calls
    assert (variant, steps) == (panel.variant.value, 3)
    assert held and running.startswith("training run 1: native, random init, 3 steps")
    assert panel.status.value.endswith(f"error: {message}</span>")  # the whole line, shown
    assert not panel.run_button.disabled  # released: the user can fix and press again
    assert panel.results == [] and panel.curves == {} and panel.plot.value == empty_plot
    assert (panel.progress.value, panel.progress.max) == (0, 3)


def _shown(widget):
    """Every widget in the displayed tree under ``widget``."""
    children = getattr(widget, "children", ())
    return [widget, *(w for child in children for w in _shown(child))]


def test_panel_before_a_run():
    panel = TrainingPanel()
    shown = _shown(panel.widget)
    controls = ("variant", "init", "steps", "run_button", "progress", "status", "plot")
    for name in controls:
        assert any(w is getattr(panel, name) for w in shown), f"{name} is not displayed"
    assert list(panel.variant.options) == list(VARIANTS)  # every registered variant
    assert set(panel.init.options) == set(INITS)
    assert panel.status.value == "Press <b>Run</b> to train." and not panel.run_button.disabled
    assert (panel.progress.value, panel.progress.max) == (0, panel.steps.value)
    assert bytes(panel.plot.value).startswith(PNG) and panel.results == []
    bundle = panel._repr_mimebundle_()  # the notebook cell displays the whole tree
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == panel.widget.model_id
