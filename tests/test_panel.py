"""The interactive panel's callback, driven through its widgets as a user would."""

import pytest

from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.lessons.panel import TrainingPanel

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
    def failing_run(*args, **kwargs):
        raise ConfigError("steps must be a positive integer, got 0")

    panel = TrainingPanel(out_root=tmp_path, run_fn=failing_run)
    panel.run_button.click()
    assert "error: steps must be a positive integer" in panel.status.value
    assert not panel.run_button.disabled and panel.results == []


def test_panel_displays_as_a_widget():
    bundle = TrainingPanel()._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


@pytest.mark.parametrize("name", ["variant", "init", "steps", "run_button", "progress", "plot"])
def test_panel_has_its_controls(name):
    assert getattr(TrainingPanel(), name) is not None
