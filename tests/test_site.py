"""The docs site builds offline with `sphinx-build -W` and has a page for every notebook, with show_doc
signatures and every figure the executed notebooks produced. Then every page is loaded in a headless Chromium, as a
reader sees it at 1280 px: no console errors, the maths typeset and no TeX left raw, every image loaded, the results
pages showing their tables and figures, each report's claims ledger with links that reach their sections, no table
wider than the content column and no header broken inside a word, no placeholder of a path taken for a tag, code that fits the column, the finding's table on
the landing page's first screens, and a sidebar that leads with the results. Screenshots of the landing page, 01_xsa,
the results index, the cpu results and claims ledger and the first study page are kept in `_artifacts/screenshots/`."""
import html
import json
import os
import re
import subprocess
import sys

import pytest

from xsa_nb.docs import REPORT_PAGES, build_site
from xsa_nb.experiments import PIPELINE_CHECKS

from browser import NO_CHROMIUM, Browser, find_chromium, serve
from conftest import NOTEBOOKS, ROOT

pytestmark = [pytest.mark.site, pytest.mark.xdist_group("site")]  # `make test` runs these after the notebooks

PLAIN_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})  # Sphinx's smart quotes
ARTIFACTS = ROOT / "_artifacts" / "screenshots"
STUDIES = sorted(nb.stem for nb in NOTEBOOKS if re.match(r"2\d*_", nb.stem))  # the study notebooks, nbs/2*_*
SCREENSHOTS = {"index.html": "index.png", "01_xsa.html": "01_xsa.png", "results/README.html": "results_index.png",
               "results/cpu/index.html": "results_cpu.png", "results/cpu/claims.html": "claims_cpu.png",
               **{f"{s}.html": "study.png" for s in STUDIES[:1]}}
FIRST_SCREENS = 2400  # px of the landing page within which its finding's table must start
FACTS = r"""(() => {
  const column = document.querySelector("article.bd-article"), box = column.getBoundingClientRect();
  const maths = [...column.querySelectorAll(".math")];
  return {
    width: box.width,
    contentsColumn: !!document.querySelector(".bd-sidebar-secondary"),
    maths: maths.length,
    typeset: maths.filter(m => m.querySelector("mjx-container") && !m.querySelector("mjx-merror")).length,
    images: document.images.length,
    firstTable: (() => { const t = column.querySelector("table"); return t && t.getBoundingClientRect().top + scrollY; })(),
    code: (() => {  // code blocks, and those wider than their box (a reader would have to scroll them sideways)
      const pres = [...column.querySelectorAll("pre")];
      return {blocks: pres.length, overflowing: pres.filter(p => p.scrollWidth > p.clientWidth + 1).length};
    })(),
    brokenHeaders: (() => {  // words of table headers laid out on two lines (a break after _ or - is between words)
      const broken = [];
      for (const th of column.querySelectorAll("th")) {
        const walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode())
          for (const m of n.textContent.matchAll(/[^\s\u200b/-]+/g)) {
            const r = document.createRange();
            r.setStart(n, m.index);
            r.setEnd(n, m.index + m[0].length);
            if (new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top))).size > 1)
              broken.push(m[0]);
          }
      }
      return broken;
    })(),
    rawTex: (() => {  // TeX not typeset: a sub- or superscript in braces in prose, tables or notes (not code, not
      const raw = [], walk = document.createTreeWalker(column, NodeFilter.SHOW_TEXT);  // docstrings: they are code's)
      for (let n = walk.nextNode(); n; n = walk.nextNode())
        if (!n.parentElement.closest("pre, code, .highlight, .math, mjx-container, .cell_output") &&
            /[_^]\{/.test(n.textContent))
          raw.push(n.textContent.trim().slice(0, 120));
      return raw;
    })(),
    swallowed: (() => {  // a path whose placeholder (`<study>` outside code) the HTML took for a tag: "docs/results//"
      const prose = column.cloneNode(true);  // the text as read, less code and scripts (`//`: an operator, a comment)
      prose.querySelectorAll("pre, code, .highlight, script, style").forEach(e => e.remove());
      return (prose.textContent.match(/\S*[\w-]\/\/(?!\/)\S*/g) || []).filter(p => !p.includes("://"));
    })(),
    broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute("src")),
    rawTables: (() => {  // Markdown table rows left as text outside code: tables that were not rendered
      const rows = [], walk = document.createTreeWalker(column, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode())
        if (!n.parentElement.closest("pre, code, .highlight"))
          rows.push(...n.textContent.split("\n").filter(l => /\|\s*(:?-{3,}:?|—)\s*\|/.test(l)));
      return rows;
    })(),
    tables: [...column.querySelectorAll("table")].map(t => {
      const r = t.getBoundingClientRect();
      const edge = Math.min(r.right, document.documentElement.clientWidth);  // what a reader sees without scrolling
      return {left: r.left - box.left, right: box.right - r.right, hidden: t.scrollWidth - t.clientWidth,
              scrolls: ["auto", "scroll"].includes(getComputedStyle(t).overflowX),
              verdicts: [...t.querySelectorAll("th")].filter(th => /verdict/.test(th.textContent))
                                                   .map(th => th.getBoundingClientRect().right - edge)};
    }),
  };
})()"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build_site(ROOT, out=tmp_path_factory.mktemp("html")).parent


def test_every_notebook_has_a_page(site):
    assert (site / "index.html").exists()
    for nb in NOTEBOOKS:
        page = site / ("index.html" if nb.stem == "00_index" else f"{nb.stem}.html")
        assert page.exists(), f"no page for {nb.name}"
        assert not re.search(r"class=\"c1\">#\|", page.read_text(encoding="utf-8")), f"{page.name} shows nbdev directives"


def test_every_page_shows_its_whole_description(site):
    "The `> ...` line under each notebook's title is its page's description box: all of it, not its first line only."
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        title_cell = next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown" and c["source"][0].startswith("# "))
        quote = " ".join(line[2:] for line in title_cell.splitlines() if line.startswith("> "))
        assert quote, f"{nb.name}: no description under its title"
        page = site / ("index.html" if nb.stem == "00_index" else f"{nb.stem}.html")
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))).translate(PLAIN_QUOTES)
        assert " ".join(quote.replace("`", "").split()) in " ".join(text.split()), \
            f"{nb.name}: description {quote!r} not shown whole"


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


def test_make_test_ends_saying_when_no_browser_checked_the_site(tmp_path):
    """The site tests skip without a Chromium; `make test`'s last command then prints one line saying the site was not
    checked in a browser and how to get one, and prints nothing where there is a browser."""
    browser_py = [sys.executable, str(ROOT / "tests" / "browser.py")]
    none = subprocess.run(browser_py, env=os.environ | {"CHROMIUM": str(tmp_path / "none")}, capture_output=True, text=True)
    assert none.returncode == 0 and none.stdout == NO_CHROMIUM + "\n", none
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    found = subprocess.run(browser_py, env=os.environ | {"CHROMIUM": str(fake)}, capture_output=True, text=True)
    assert found.returncode == 0 and found.stdout == "", found
    recipe = subprocess.run(["make", "-n", "--no-print-directory", "test"], capture_output=True, text=True, cwd=ROOT)
    assert recipe.returncode == 0 and recipe.stdout.splitlines()[-1].endswith("python tests/browser.py"), recipe.stdout


@pytest.fixture(scope="module")
def browsed(site):
    "Every page of the site loaded over HTTP in headless Chromium: `{page: facts}`, each with its console errors."
    chromium = find_chromium()
    if chromium is None:
        pytest.skip(NO_CHROMIUM)
    server = serve(site)
    browser = Browser(chromium)
    try:
        pages = {}
        for path in sorted(site.rglob("*.html")):
            page = path.relative_to(site).as_posix()
            if page.startswith(("_", "genindex", "search")):  # Sphinx's own index and search pages: not content
                continue
            browser.open(f"http://127.0.0.1:{server.server_address[1]}/{page}")
            pages[page] = browser.evaluate(FACTS) | {"errors": browser.errors}
            if page in SCREENSHOTS:
                browser.screenshot(ARTIFACTS / SCREENSHOTS[page])
        return pages
    finally:
        browser.close()
        server.shutdown()


def test_every_page_is_seen(browsed):
    expected = {"index.html"} | {f"{nb.stem}.html" for nb in NOTEBOOKS[1:]} | {"results/bench.html"}
    assert expected <= set(browsed), sorted(expected - set(browsed))
    assert all((ARTIFACTS / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in SCREENSHOTS.values())


def test_no_console_errors(browsed):
    errors = {page: facts["errors"] for page, facts in browsed.items() if facts["errors"]}
    assert not errors, errors


def test_math_is_typeset(browsed):
    untypeset = {page: f"{f['typeset']} of {f['maths']}" for page, f in browsed.items() if f["typeset"] < f["maths"]}
    assert not untypeset, untypeset
    assert browsed["01_xsa.html"]["maths"] > 50 and browsed["index.html"]["maths"] > 0  # the check saw maths


def test_every_image_loads(browsed):
    broken = {page: f["broken"] for page, f in browsed.items() if f["broken"]}
    assert not broken, broken


def test_results_pages_show_their_tables_and_figures(browsed):
    results = sorted((ROOT / "docs" / "results").rglob("*.md"))
    shown = [p for p in results if (p.name in REPORT_PAGES or p.parent == ROOT / "docs" / "results")
             and p.relative_to(ROOT / "docs" / "results").parts[0] not in PIPELINE_CHECKS]  # left out of the site
    assert shown, "no results pages"
    for md in shown:
        page = md.relative_to(ROOT / "docs").with_suffix(".html").as_posix()
        text = md.read_text(encoding="utf-8")
        tables, figures = len(re.findall(r"^\|[-| :]+\|$", text, re.M)), text.count("![")
        assert len(browsed[page]["tables"]) == tables and browsed[page]["images"] >= figures, (page, tables, figures)


def test_every_report_has_its_claims_ledger(site, browsed):
    """Each report on the site has its claims ledger page (`12c_claims`): it opens, shows one table, and every section it
    links leads to a heading of a notebook page."""
    reports = [p.parent.name for p in (ROOT / "docs" / "results").glob("*/index.md") if p.parent.name not in PIPELINE_CHECKS]
    assert reports, "no report on the site"
    for report in reports:
        page = f"results/{report}/claims.html"
        assert page in browsed and len(browsed[page]["tables"]) == 1, (page, browsed.get(page, {}).get("tables"))
        links = re.findall(r'href="\.\./\.\./([\w.-]+\.html)#([\w-]+)"', (site / page).read_text(encoding="utf-8"))
        assert links, f"{page} links no notebook section"
        missing = [(target, anchor) for target, anchor in set(links)
                   if f'id="{anchor}"' not in (site / target).read_text(encoding="utf-8")]
        assert not missing, (page, missing)


def test_results_pages_give_the_contents_column_to_their_tables(browsed):
    "At 1280 px the notebook pages keep the right-hand page contents; the results pages' wide tables get its width."
    results = {page: f for page, f in browsed.items() if page.startswith("results/")}
    assert results and browsed["01_xsa.html"]["contentsColumn"]
    crowded = {page: (f["contentsColumn"], round(f["width"])) for page, f in results.items()
               if f["contentsColumn"] or f["width"] < 900}
    assert not crowded, crowded


def test_every_verdict_is_visible_at_1280_px(browsed):
    "A results table's verdict column is on screen at 1280 px without scrolling the table sideways."
    verdicts = [(page, v) for page, f in browsed.items() if page.startswith("results/") for t in f["tables"]
                for v in t["verdicts"]]
    assert len(verdicts) >= 5, verdicts  # the check saw the cpu report's verdict columns
    hidden = [(page, round(v)) for page, v in verdicts if v > 1]
    assert not hidden, hidden


def test_every_markdown_table_is_rendered(browsed):
    raw = {page: f["rawTables"] for page, f in browsed.items() if f["rawTables"]}
    assert not raw, raw


def test_no_table_is_wider_than_the_content_column(browsed):
    "At 1280 px every table fits its column whole: nothing spills over it, nothing is hidden behind a sideways scroll."
    spilling = {page: t for page, f in browsed.items() for t in f["tables"]
                if t["left"] < -1 or t["right"] < -1 or t["hidden"] > 0}
    assert not spilling, spilling
    assert browsed["results/cpu/claims.html"]["tables"] and browsed["results/cpu/index.html"]["tables"]  # checked


def test_no_table_header_breaks_inside_a_word(browsed):
    broken = {page: f["brokenHeaders"] for page, f in browsed.items() if f["brokenHeaders"]}
    assert not broken, broken


def test_code_fits_the_column(browsed):
    "A derivation page's code wraps at its column: at most a few blocks (a long table printed, say) scroll sideways."
    wide = {page: f"{f['code']['overflowing']} of {f['code']['blocks']}" for page, f in browsed.items()
            if f["code"]["overflowing"] > 3}
    assert not wide, wide
    assert browsed["01_xsa.html"]["code"]["blocks"] > 30  # the check saw the derivation's code


def test_no_placeholder_is_swallowed(browsed):
    "A `<study>` written outside code is read as an HTML tag and vanishes: no `docs/results//` on any page."
    swallowed = {page: f["swallowed"] for page, f in browsed.items() if f["swallowed"]}
    assert not swallowed, swallowed


def test_no_tex_is_left_raw(browsed):
    "Maths renders everywhere: no `t_{1−α/2,n−1}` left as text in prose, tables or notes."
    raw = {page: f["rawTex"] for page, f in browsed.items() if f["rawTex"]}
    assert not raw, raw


def test_the_finding_s_table_is_on_the_landing_page_s_first_screens(browsed):
    "A researcher meets the finding's table within the landing page's first 2,400 px, before how to install or run."
    top = browsed["index.html"]["firstTable"]
    assert top is not None and top < FIRST_SCREENS, f"the landing page's first table starts at {top} px"


def test_the_sidebar_leads_with_the_results(site):
    """The sidebar's first section is Results, opening with the results index and a claims ledger; the study notebooks
    (nbs/2*_*) have their own section, Studies, each page named by its notebook's title."""
    page = (site / "index.html").read_text(encoding="utf-8")
    nav = page[page.index("bd-docs-nav"):page.index("</nav>", page.index("bd-docs-nav"))]
    captions = re.findall(r'<span class="caption-text">([^<]+)</span>', nav)
    assert captions[0] == "Results" and ("Studies" in captions) == bool(STUDIES), captions
    start = nav.index("Results</span>")
    results = nav[start:nav.index('caption-text">', start)]
    links = re.findall(r'<a class="reference internal" href="([^"]+)"', results)
    assert links[:2] == ["results/README.html", "results/cpu/claims.html"], links[:4]
    for stem in STUDIES:
        cells = json.loads((ROOT / "nbs" / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
        title = next(line[2:] for c in cells if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()
                     if line.startswith("# "))
        shown = [html.unescape(re.sub(r"<[^>]+>", "", a)).translate(PLAIN_QUOTES)
                 for a in re.findall(rf'href="{stem}.html">(.*?)</a>', nav)]
        assert shown == [title.replace("`", "")], (stem, title, shown)
