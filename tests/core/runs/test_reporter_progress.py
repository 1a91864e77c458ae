"""The progress bar honours tqdm's TQDM_DISABLE in a notebook too (the static site)."""

import tqdm.auto
import tqdm.notebook

from qwen3_trn_helpers.runs.reporter import Reporter


def test_tqdm_disable_reaches_the_notebook_bar(monkeypatch):
    """tqdm.notebook (what tqdm.auto gives in a kernel) ignores TQDM_DISABLE by itself;
    the site's build sets it, and a bar's first frame ("0/10 [") froze on the page."""
    asked = []

    def notebook_bar(*args, **kwargs):
        asked.append(kwargs.get("disable"))
        return tqdm.notebook.tqdm(*args, **kwargs)

    monkeypatch.setattr(tqdm.auto, "tqdm", notebook_bar)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    step_done, close = Reporter(progress=True).steps(total=10, desc="run")
    step_done({"step": 1, "loss": 11.9})
    close()
    monkeypatch.delenv("TQDM_DISABLE")
    Reporter(progress=True).steps(total=10, desc="run")[1]()
    assert asked == [True, False]  # off on the site's build, shown in a plain kernel
