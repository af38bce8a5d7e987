"""The docs site builds offline with `sphinx-build -W` and has a page for every notebook, with show_doc
signatures and every figure the executed notebooks produced."""
import json
import re

import pytest

from xsa_nb.docs import build_site

from conftest import NOTEBOOKS, ROOT


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build_site(ROOT, out=tmp_path_factory.mktemp("html")).parent


def test_every_notebook_has_a_page(site):
    assert (site / "index.html").exists()
    for nb in NOTEBOOKS:
        page = site / ("index.html" if nb.stem == "00_index" else f"{nb.stem}.html")
        assert page.exists(), f"no page for {nb.name}"
        assert not re.search(r"class=\"c1\">#\|", page.read_text(encoding="utf-8")), f"{page.name} shows nbdev directives"


def test_show_doc_signatures_are_rendered(site):
    html = (site / "91_docs.html").read_text(encoding="utf-8")
    assert 'id="build-site">build_site<' in html, "show_doc heading of build_site missing"
    assert '<a href="91_docs.html#build-site">' in html, "nbdev's doc links do not point at the local page"
    assert re.search(r'id="build-site">build_site</p>\s*<div class="highlight-python[^>]*"><div class="highlight"><pre>'
                     r'<span></span><span class="k">def</span><span class="w"> </span><span class="nf">build_site</span>', html), \
        "the signature of build_site is not rendered under its heading"
    assert "<em>Build the static docs site" in html, "the docstring of build_site is not rendered"


def test_figures_are_rendered(site):
    for nb in NOTEBOOKS:
        executed = json.loads((ROOT / "_exec" / nb.name).read_text(encoding="utf-8"))
        n_png = sum("image/png" in o.get("data", {}) for c in executed["cells"] for o in c.get("outputs", []))
        page = site / ("index.html" if nb.stem == "00_index" else f"{nb.stem}.html")
        n_img = len(re.findall(r"<img[^>]+src=\"_images/", page.read_text(encoding="utf-8")))
        assert n_img >= n_png, f"{page.name}: {n_png} figures executed, {n_img} shown"


def test_index_links_every_notebook(site):
    html = (site / "index.html").read_text(encoding="utf-8")
    for nb in NOTEBOOKS[1:]:
        assert f'href="{nb.stem}.html"' in html, f"index does not link {nb.stem}"
