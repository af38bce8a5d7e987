"""Sphinx configuration of the docs site; `xsa_nb docs build` (make docs) writes the pages into docs/_src."""
import re

from docutils import nodes

project = "xsa_nb"
author = "xsa_nb contributors"
copyright = "2026 onwards, xsa_nb contributors"
root_doc = "index"
extensions = ["myst_nb", "sphinx-mathjax-offline"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
nb_execution_mode = "off"  # notebooks arrive already executed under nbdev's test rules
nb_merge_streams = True
nb_render_markdown_format = "myst"  # Markdown outputs (the index's results table) with tables, as cells have
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]  # report pages jump from H1 to H3 sections
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_theme = "sphinx_book_theme"
html_title = "xsa_nb"
# The notebook pages (top level) keep the right-hand page contents; the results pages, and the notebooks that show a
# report's or the benchmark's widest tables (19 and 15 columns), give its width to their tables.
html_theme_options = {"show_toc_level": 2, "home_page_in_toc": True,
                      "secondary_sidebar_items": {"*": ["page-toc"], "results/**": [], "12_report": [], "13_bench": []}}
html_context = {"default_mode": "auto"}  # the theme's colour mode before a reader picks one (empty: a console error)
html_static_path = ["_static"]
html_css_files = ["xsa_nb.css"]  # tables and code fit the content column: cells and lines wrap
html_favicon = "_static/favicon.svg"  # without one, every browser asks for /favicon.ico and logs a 404


def _header_breaks(app, doctree, docname) -> None:
    """Let a table header break after an underscore (`ci_high` → `ci_` / `high`) but not at an en dash between two
    words or numbers (`0–15`, `Newton–Schulz`, where a browser would break after the dash); the CSS keeps words whole."""
    for head in doctree.findall(nodes.thead):
        for text in list(head.findall(nodes.Text)):
            new = re.sub(r"(?<=\w)–(?=\w)", "\u2060–\u2060", str(text).replace("_", "_\u200b"))  # U+2060: no break
            if new != text:
                text.parent.replace(text, nodes.Text(new))


def setup(app):
    app.connect("doctree-resolved", _header_breaks)
