"""Sphinx configuration of the course's static site (scripts/build_site.sh builds it).

Sphinx with myst-nb: myst-nb executes each notebook with its Jupyter kernel and renders
the outputs (tables, figures) into HTML, and MyST reads the instructor's kit (Markdown)
as it is; the result is a folder of plain HTML that opens from disk, offline.
"""

import os

project = "qwen3-trn: training Qwen3 on Trainium2 with torchtitan"
author = "qwen3-trn"
extensions = ["myst_nb"]
master_doc = "index"
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
# no widget JavaScript from a CDN (require.js, the widget manager): the site must open
# offline; a widget's output shows as its text form, as the panel in notebook 03 does
nb_ipywidgets_js: dict = {}
html_theme = "alabaster"
html_title = "qwen3-trn course"
html_theme_options = {"sidebar_width": "230px", "page_width": "1180px"}
html_static_path: list[str] = []
html_show_sourcelink = False
html_copy_source = False
# MathJax (formulas) is the one resource fetched from the network when online; offline
# the formulas show as their TeX source, and everything else works
