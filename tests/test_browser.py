"""Every notebook, run in JupyterLab in a real browser (Debian's Chromium via Playwright).

The one place widgets are checked as a user sees them. Starts JupyterLab on loopback,
opens each notebook, runs all cells through JupyterLab's own "Run All" command, and
checks that no cell shows an error, that the loss plots render, and that the training
panel's widgets render. Screenshots go to artifacts/browser/.

Skipped when Chromium or Playwright is missing, unless QWEN3_TRN_REQUIRE_BROWSER=1 (CI
sets it, so a missing browser fails there instead of silently skipping).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("QWEN3_TRN_CHROMIUM", "/usr/bin/chromium")
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    port, token = _free_port(), "qwen3-trn-browser-test"
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

RUN_ALL = (
    """(path) => {
  const nb = ("""
    + FIND_NOTEBOOK
    + """)(path);
  window.jupyterapp.shell.activateById(nb.id);
  return window.jupyterapp.commands.execute('notebook:run-all-cells');
}"""
)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_in_jupyterlab(name, jupyterlab, browser):
    base, token = jupyterlab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        path = f"notebooks/{name}"
        # a workspace of its own, reset: no tabs restored from the other notebooks
        url = f"{base}/lab/workspaces/{Path(name).stem}/tree/{path}?reset&token={token}"
        page.goto(url, timeout=120_000)
        page.wait_for_function(
            "(p) => { const s = (" + NOTEBOOK_STATE + ")(p); return s && s.kernel === 'idle'; }",
            arg=path,
            timeout=120_000,
        )
        page.evaluate(RUN_ALL, path)
        page.wait_for_function(
            "(p) => { const s = (" + NOTEBOOK_STATE + ")(p); return s && s.kernel === 'idle'"
            " && (s.errors.length > 0 || s.executed === s.cells); }",
            arg=path,
            timeout=900_000,
            polling=1000,
        )
        state = page.evaluate(NOTEBOOK_STATE, path)
        page.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}.png"), full_page=True)
        assert state["errors"] == [], state["errors"]
        assert state["executed"] == state["cells"]
        if name.startswith("03_"):
            images = page.locator(".jp-RenderedImage img")
            assert images.count() >= 1  # the loss figure
            assert page.evaluate(
                "() => [...document.querySelectorAll('.jp-RenderedImage img')]"
                ".every(i => i.naturalWidth > 0)"
            )
            run_button = page.locator(".jupyter-widgets button", has_text="Run")
            run_button.first.scroll_into_view_if_needed()
            assert run_button.first.is_visible()  # the training panel rendered
            assert page.locator(".jupyter-widgets .widget-dropdown select").count() >= 1
            page.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}-panel.png"))
    finally:
        page.close()
