"""The course's two static sites, opened from disk in a real browser (Debian's Chromium).

scripts/build_site.sh builds them (Sphinx + myst-nb: every notebook executed once): the
student site (notebooks, figures, self-checks; no answer key) and the instructor's kit.
Here the pages are read for what must not be in them (the key, TeX source, warnings, a
blank widget), then Chromium opens every page from the folder with the network cut off
(no host at all, not even a CDN for formulas), and checks that each page loads, that
every figure is shown (decoded, non-zero size), that formulas are typeset (MathML) and
that every link inside the site points at a file that exists, and at an anchor that
exists. Screenshots of the front page and of one self-check go to artifacts/site/.

Its own CI step (marker ``site``; ``scripts/test.sh --site``): the build executes every
notebook, as long as their nbval run. ``QWEN3_TRN_SITE_DIR`` checks an existing build
instead of building one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("QWEN3_TRN_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("QWEN3_TRN_ARTIFACTS", ROOT / "artifacts")) / "site"
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("0*.ipynb"))
DOCS = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
#: the instructor's key: its marker, its heading, and one answer only it holds
KEY_TEXT = ("answer key", "Answers to the predictions", "slots for 512 token-expert pairs")
#: what a library prints as a warning; on a page it is noise
WARNING_TEXT = re.compile(r"Warning:|UserWarning|FutureWarning|No CUDA runtime|\d+/\d+ \[")


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


def _broken_links(site: Path) -> list[str]:
    """Every link inside a built site to a file or an anchor that is not there."""
    broken = []
    for html in site.rglob("*.html"):
        text = html.read_text(errors="replace")
        for href in re.findall(r'href="([^"]*)"', text):
            url = urlparse(href)
            if url.scheme or not (url.path or url.fragment):
                continue
            target = (html.parent / unquote(url.path)) if url.path else html
            if not target.exists():
                broken.append(f"{html.relative_to(site)}: {href}")
            elif url.fragment and target.suffix == ".html":
                if f'id="{url.fragment}"' not in target.read_text(errors="replace"):
                    broken.append(f"{html.relative_to(site)}: no anchor {href}")
    return broken


def test_the_reference_pages_build_alone_and_link_inside(tmp_path):
    """``scripts/build_site.sh --docs``: the docs/ pages without the notebooks, in
    seconds, with the site's configuration; Sphinx's -W fails the build on a link to a
    missing page or heading, and every link of the result resolves."""
    env = {**os.environ, "QWEN3_TRN_VENV": str(Path(sys.executable).parent.parent)}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_site.sh"), "--docs", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    built = tmp_path / "docs"
    assert (built / "reference.html").exists()
    assert {p.stem for p in (built / "docs").glob("*.html")} == set(DOCS)
    assert not _broken_links(built)


def _text(html: Path) -> str:
    """A page's visible text, roughly: tags and MathML dropped."""
    body = re.sub(r"<math.*?</math>", " ", html.read_text(errors="replace"), flags=re.S)
    body = re.sub(r"<(script|style).*?</\1>", " ", body, flags=re.S)
    return re.sub(r"<[^>]+>", " ", body)


def test_two_sites_students_without_the_answers(site):
    student, instructor = site / "student", site / "instructor"
    pages = {p.stem for p in student.glob("*.html")}
    assert set(NOTEBOOKS) <= pages and "index" in pages and "kit" not in pages
    # the reference pages (docs/) are a section of the student site
    assert "reference" in pages
    assert {p.stem for p in (student / "docs").glob("*.html")} == set(DOCS)
    for html in student.rglob("*.html"):
        text = html.read_text(errors="replace")
        assert not any(k in text for k in KEY_TEXT), f"{html.name} holds the answer key"
        links = re.findall(r'href="([^"]*)"', text)
        assert not any("instructor" in h for h in links), f"{html.name} links to the kit"
    kit = (instructor / "index.html").read_text()
    assert all(k in kit for k in KEY_TEXT[1:]) and "The trn2 day" in kit
    assert "instructor" in re.search(r"<title>(.*?)</title>", kit, re.S).group(1)


def test_pages_hold_typeset_formulas_no_warnings_and_stand_ins(site):
    """No TeX source (formulas are MathML), no library warning or frozen progress bar,
    a text stand-in for the panel, and every self-check with its answers folded."""
    student = site / "student"
    for html in [*student.glob("0*.html"), site / "instructor" / "index.html"]:
        text = _text(html)
        assert not re.search(r"\\(ln|sigma|text|Delta)\b", text), f"TeX source in {html}"
        assert not WARNING_TEXT.search(text), f"{html.name}: {WARNING_TEXT.search(text)[0]!r}"
    page03 = (student / "03_ten_step_run.html").read_text()
    assert "<math" in page03 and "The training panel: a live widget" in page03
    for stem in NOTEBOOKS:
        folded = (student / f"{stem}.html").read_text().count("<summary>Answer</summary>")
        assert 3 <= folded <= 5, f"{stem}: {folded} self-check answers"


def test_every_page_loads_shows_its_figures_and_links_inside(site):
    if not Path(CHROMIUM).exists():
        if os.environ.get("QWEN3_TRN_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test required but {CHROMIUM} not found")
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    pages = sorted(p for p in site.rglob("*.html") if p.stem not in ("genindex", "search"))
    blocked: list[str] = []
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context()

        def offline(route):
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
            # a formula is typeset: MathML laid out by the browser, a box of real size
            sizes = page.eval_on_selector_all(
                "math", "els => els.map(e => e.getBoundingClientRect().width)"
            )
            if any(w <= 0 for w in sizes):
                problems.append(f"{html.name}: a formula not laid out")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto((site / "student" / "index.html").as_uri(), wait_until="load")
        page.screenshot(path=str(ARTIFACTS / "student-front-page.png"))
        page.goto((site / "student" / "06_graph_capture.html").as_uri(), wait_until="load")
        check = page.locator("div.self-check").first
        check.locator("details").first.locator("summary").click()  # unfold one answer
        assert check.locator("details").first.evaluate("d => d.open")
        check.screenshot(path=str(ARTIFACTS / "student-self-check.png"))
        browser.close()
    assert not problems, "\n".join(problems)
    assert not errors, errors
    assert not blocked, f"the site fetched from the network: {blocked}"
    images = site / "student" / "_images"
    figures = sum(len(list(images.glob(ext))) for ext in ("*.png", "*.svg"))
    assert figures >= 5  # the stack diagram and the notebooks' plots
