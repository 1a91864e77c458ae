"""The course as a static site, opened from disk in a real browser (Debian's Chromium).

scripts/build_site.sh builds it (Sphinx + myst-nb: every notebook executed, the kit);
here Chromium opens every page from the folder with the network cut off, and checks
that each page loads, that every figure is shown (decoded, non-zero size) and that
every link inside the site points at a file that exists, and at an anchor that exists.

Its own CI step (marker ``site``; ``scripts/test.sh --site``): the build executes every
notebook, as long as their nbval run. ``QWEN3_TRN_SITE_DIR`` checks an existing build
instead of building one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("QWEN3_TRN_CHROMIUM", "/usr/bin/chromium")
#: fetched from the network when online (formulas); offline they show as TeX source
OPTIONAL_HOSTS = ("cdn.jsdelivr.net",)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    given = os.environ.get("QWEN3_TRN_SITE_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("site") / "html"
    env = {**os.environ, "QWEN3_TRN_VENV": str(Path(sys.executable).parent.parent)}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_site.sh"), str(out)],
        capture_output=True, text=True, env=env, timeout=3600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_the_site_holds_every_notebook_and_the_kit(site):
    pages = {p.stem for p in site.glob("*.html")}
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("0*.ipynb")}
    assert notebooks <= pages and {"index", "kit"} <= pages


def test_every_page_loads_shows_its_figures_and_links_inside(site):
    if not Path(CHROMIUM).exists():
        if os.environ.get("QWEN3_TRN_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test required but {CHROMIUM} not found")
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    pages = sorted(p for p in site.glob("*.html") if p.stem not in ("genindex", "search"))
    blocked: list[str] = []
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context()

        def offline(route):
            host = urlparse(route.request.url).hostname or ""
            if host not in OPTIONAL_HOSTS:
                blocked.append(route.request.url)
            route.abort()

        context.route("http*://**/*", offline)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        for html in pages:
            response = page.goto(html.as_uri(), wait_until="load")
            assert response is None or response.ok, html
            title = page.title()
            if not title or "404" in title:
                problems.append(f"{html.name}: no title")
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.src, e.complete, e.naturalWidth])"
            )
            for src, complete, width in images:
                if not (complete and width > 0):
                    problems.append(f"{html.name}: figure not shown: {src}")
            links = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
            for href in links:
                url = urlparse(href)
                if url.scheme != "file":
                    continue
                target = Path(unquote(url.path))
                if not target.exists():
                    problems.append(f"{html.name}: broken link {href}")
                elif url.fragment and target.suffix == ".html":
                    text = target.read_text(errors="replace")
                    if f'id="{url.fragment}"' not in text:
                        problems.append(f"{html.name}: no anchor {href}")
        browser.close()
    assert not problems, "\n".join(problems)
    assert not errors, errors
    assert not blocked, f"the site fetched from the network: {blocked}"
    figures = sum(len(list((site / "_images").glob(ext))) for ext in ("*.png", "*.svg"))
    assert figures >= 5  # the stack diagram and the notebooks' plots
