"""Sphinx configuration of the course's two static sites (scripts/build_site.sh).

One build, two sites: the **student** site (the notebooks, executed, with their figures
and self-checks, the student page, and the reference pages of docs/; no answer key) and
the **instructor's kit** (notebooks/INSTRUCTOR.md: the plans, the answers, the trn2 day),
each in its own folder, so the answers are never one click from what students read.
``QWEN3_TRN_SITE_KIND`` says which this run builds (``docs``: the reference pages alone,
``scripts/build_site.sh --docs``).

Sphinx with myst-nb: myst-nb executes each notebook with its Jupyter kernel and renders
the outputs (tables, figures) into HTML. Everything opens from disk, offline: formulas
are MathML written at build time (site/mathml.py), widgets show a text stand-in.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # site/mathml.py

KIND = os.environ.get("QWEN3_TRN_SITE_KIND", "student")
if KIND not in ("student", "instructor", "docs"):
    raise ValueError(f"QWEN3_TRN_SITE_KIND={KIND!r}: student, instructor or docs")

author = "qwen3-trn"
extensions = ["myst_nb", "mathml"]
html_math_renderer = "mathml"
# docs: the reference pages alone (scripts/build_site.sh --docs), rooted at their contents
master_doc = "reference" if KIND == "docs" else "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "solutions"]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
# execute every notebook at build time, as nbval does, and stop on a failing cell
# (QWEN3_TRN_SITE_EXECUTION=off renders them unexecuted: a quick look at the layout)
nb_execution_mode = os.environ.get("QWEN3_TRN_SITE_EXECUTION", "force")
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
# a library's warnings on stderr ("No CUDA runtime is found", a deprecation) are noise on
# a page; what a notebook means to show it prints to stdout or displays
nb_output_stderr = "remove"
# no widget JavaScript (require.js, the widget manager from a CDN): the site opens
# offline. Without it a widget's view would render blank, so for HTML the widget view
# is dropped and its text/html or text/plain form shows: the self-checks' folded
# answers, the training panel's stand-in
nb_ipywidgets_js: dict = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
html_theme = "alabaster"
if KIND == "student":
    project = "Training Qwen3 on Trainium2 with torchtitan"
    html_title = "qwen3-trn course"
elif KIND == "docs":
    project = "qwen3-trn reference"
    html_title = "qwen3-trn reference"
else:
    project = "qwen3-trn course: the instructor's kit"
    html_title = "the instructor's kit (qwen3-trn course)"
html_theme_options = {"sidebar_width": "230px", "page_width": "1180px"}
html_static_path: list[str] = []
html_show_sourcelink = False
html_show_copyright = False  # no copyright line is set: the footer showed a bare "©."
html_copy_source = False
