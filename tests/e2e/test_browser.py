"""The training panel, used in JupyterLab in a real browser (Debian's Chromium, Playwright).

The one place widgets are checked as a user sees them. nbval already executes every
notebook (so nothing is executed twice): here JupyterLab opens notebook 03, runs only the
cells tagged ``setup`` and ``panel``, presses the panel's **Run** button, and checks that
the progress bar and the loss plot update as steps complete and that no cell shows an
error. Screenshots go to artifacts/browser/.

Skipped when Chromium or Playwright is missing, unless QWEN3_TRN_REQUIRE_BROWSER=1 (CI
sets it, so a missing browser fails there instead of silently skipping).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from qwen3_trn_helpers.training.ranks import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("QWEN3_TRN_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("QWEN3_TRN_ARTIFACTS", ROOT / "artifacts")) / "browser"
CHROMIUM_FLAGS = [  # this machine's closed network: no background connections
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found (apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright not installed"
    return None


if _missing():
    if os.environ.get("QWEN3_TRN_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"browser test required but {_missing()}")
    pytest.skip(_missing(), allow_module_level=True)


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 serving a copy of the notebooks (runs land in the copy)."""
    work = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", work / "notebooks")
    settings = work / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    # render every cell (JupyterLab 4 otherwise detaches off-screen cells from the page)
    notebook_settings = work / "settings" / "@jupyterlab" / "notebook-extension"
    notebook_settings.mkdir(parents=True)
    (notebook_settings / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none"})
    )
    port, token = free_port(), "qwen3-trn-browser-test"
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(work / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces"),  # no tabs from earlier runs
    }
    env.pop("MPLBACKEND", None)  # a user's kernel uses matplotlib's inline backend
    log = open(work / "jupyterlab.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={work}",
            "--ServerApp.allow_root=True",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.disable_check_xsrf=True",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=work,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"JupyterLab did not start: {(work / 'jupyterlab.log').read_text()}")
            time.sleep(0.5)
    yield base, token
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


# JavaScript run in the page: find the notebook panel by its path, not by focus.
FIND_NOTEBOOK = """(path) => {
  const app = window.jupyterapp;
  if (!app) return null;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.content && w.sessionContext) return w;
  }
  return null;
}"""

NOTEBOOK_STATE = (
    """(path) => {
  const nb = ("""
    + FIND_NOTEBOOK
    + """)(path);
  if (!nb || !nb.sessionContext.session) return null;
  const cells = nb.content.widgets.filter(c => c.model.type === 'code');
  const errors = [];
  cells.forEach((c, i) => c.model.outputs.toJSON().forEach(o => {
    if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
  }));
  return {
    kernel: nb.sessionContext.session.kernel ? nb.sessionContext.session.kernel.status : null,
    executed: cells.filter(c => c.model.executionCount !== null).length,
    cells: cells.length,
    errors,
  };
}"""
)

RUN_TAGGED = (
    """([path, tag]) => {
  const nb = ("""
    + FIND_NOTEBOOK
    + """)(path);
  window.jupyterapp.shell.activateById(nb.id);
  const cells = nb.content.widgets;
  const index = cells.findIndex(c => (c.model.getMetadata('tags') || []).includes(tag));
  nb.content.activeCellIndex = index;
  return window.jupyterapp.commands.execute('notebook:run-cell').then(() => index);
}"""
)

PANEL_STATE = """() => {
  const widget = document.querySelector('.jupyter-widgets.widget-hprogress');
  const label = widget ? widget.querySelector('.widget-label') : null;
  const bar = widget ? widget.querySelector('.progress-bar') : null;
  const img = [...document.querySelectorAll('.jupyter-widgets img')].pop();
  const html = [...document.querySelectorAll('.jupyter-widgets.widget-html')]
    .map(h => h.innerText);
  const step = label ? Number((label.innerText.match(/step (\\d+)/) || [0, -1])[1]) : -1;
  return {
    step: step,
    width: bar ? bar.style.width : null,
    image: img ? img.src.length + ':' + img.src.slice(-64) : null,
    imageLoaded: img ? img.naturalWidth > 0 : false,
    status: html.join(' | '),
  };
}"""


COUNT_IMAGE_UPDATES = """() => {
  window.__imageUpdates = 0;
  const panel = document.querySelector('.jupyter-widgets.widget-image');
  new MutationObserver(records => { window.__imageUpdates += records.length; })
    .observe(panel, {attributes: true, childList: true, subtree: true});
}"""


def test_training_panel_in_jupyterlab(jupyterlab, browser):
    base, token = jupyterlab
    name = "03_ten_step_run.ipynb"
    path = f"notebooks/{name}"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        url = f"{base}/lab/workspaces/panel/tree/{path}?reset&token={token}"
        page.goto(url, timeout=120_000)
        page.wait_for_function(
            "(p) => { const s = (" + NOTEBOOK_STATE + ")(p); return s && s.kernel === 'idle'; }",
            arg=path,
            timeout=120_000,
        )
        for tag in ("setup", "panel"):
            assert page.evaluate(RUN_TAGGED, [path, tag]) >= 0, f"no cell tagged {tag!r}"
            page.wait_for_function(
                "(p) => { const s = (" + NOTEBOOK_STATE + ")(p); return s.kernel === 'idle'; }",
                arg=path,
                timeout=300_000,
            )
        run_button = page.locator(".jupyter-widgets button", has_text="Run").first
        run_button.scroll_into_view_if_needed()
        page.wait_for_function("() => (" + PANEL_STATE + ")().imageLoaded", timeout=60_000)
        before = page.evaluate(PANEL_STATE)
        assert before["step"] == 0 and "Press Run" in before["status"], before
        page.screenshot(path=str(ARTIFACTS / "panel-before.png"))
        # 4 steps: type into the slider's readout, as a user can
        readout = page.locator(".jupyter-widgets.widget-hslider .widget-readout").first
        readout.click()
        readout.fill("4")
        readout.press("Enter")
        page.evaluate(COUNT_IMAGE_UPDATES)
        run_button.click()
        # the plot and the progress bar update while steps complete, not only at the end
        during = page.wait_for_function(
            "() => { const s = (" + PANEL_STATE + ")(); return s.step > 0 && s.step < 4 && s; }",
            timeout=300_000,
            polling=100,
        ).json_value()
        page.wait_for_function(
            "() => (" + PANEL_STATE + ")().status.includes('done:')",
            timeout=600_000,
            polling=500,
        )
        after = page.evaluate(PANEL_STATE)
        page.screenshot(path=str(ARTIFACTS / "panel-after.png"))
        state = page.evaluate(NOTEBOOK_STATE, path)
        assert state["errors"] == [], state["errors"]
        assert after["step"] == 4 and after["width"] == "100%", after
        assert 0 < during["step"] < 4
        # the plot was re-rendered as steps completed, not once at the end
        assert page.evaluate("() => window.__imageUpdates") >= 3
        assert after["imageLoaded"] and "loss" in after["status"]
    finally:
        page.close()


def test_a_self_check_answers_on_the_spot_in_jupyterlab(jupyterlab, browser):
    """Notebook 06's self-check as a student uses it: choose an option in the widget, and
    the verdict with its reasoning appears under the question at once."""
    base, token = jupyterlab
    path = "notebooks/06_graph_capture.ipynb"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        page.goto(f"{base}/lab/workspaces/check/tree/{path}?reset&token={token}", timeout=120_000)
        page.wait_for_function(
            "(p) => { const s = (" + NOTEBOOK_STATE + ")(p); return s && s.kernel === 'idle'; }",
            arg=path,
            timeout=120_000,
        )
        assert page.evaluate(RUN_TAGGED, [path, "self-check"]) >= 0, "no cell tagged self-check"
        form = page.locator(".jupyter-widgets.widget-vbox", has_text="Self-check, notebook 06")
        form.last.wait_for(timeout=120_000)
        first = form.last.locator(".widget-radio-box").first
        first.locator("label", has_text="5").first.click()  # dynamo's count, not eager's
        verdict = form.last.locator(".widget-html", has_text="Not quite")
        verdict.first.wait_for(timeout=30_000)
        assert "method calls" in verdict.first.inner_text()
        form.last.scroll_into_view_if_needed()
        form.last.screenshot(path=str(ARTIFACTS / "self-check-06.png"))
        assert page.evaluate(NOTEBOOK_STATE, path)["errors"] == []
    finally:
        page.close()
