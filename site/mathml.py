"""Formulas rendered to MathML when the site is built: no JavaScript, no network.

Sphinx renders math in HTML through a "math renderer" (MathJax, which a page fetches
from a CDN, or imgmath, which needs LaTeX and dvipng on the building machine). This one
converts each formula's TeX to MathML with latex2mathml (pure Python) at build time;
browsers display MathML natively (Chromium since version 109, Firefox, Safari), so the
page opens offline with its formulas typeset, not as TeX source.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from latex2mathml.converter import convert
from sphinx.application import Sphinx


def _mathml(latex: str, display: str) -> str:
    return convert(latex.strip(), display=display)


def visit_inline(self: Any, node: nodes.Element) -> None:
    self.body.append(
        f'<span class="math notranslate nohighlight">{_mathml(node.astext(), "inline")}</span>'
    )
    raise nodes.SkipNode


def visit_block(self: Any, node: nodes.Element) -> None:
    if node.get("label"):
        self.body.append(f'<span class="eqno" id="equation-{node["label"]}"></span>')
    formulas = [node.astext()] if node.get("nowrap") else node.astext().split("\n\n")
    self.body.append('<div class="math notranslate nohighlight">')
    self.body += [_mathml(f, "block") for f in formulas]
    self.body.append("</div>")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_html_math_renderer("mathml", (visit_inline, None), (visit_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
