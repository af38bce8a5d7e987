"""README.md is generated from nbs/00_index.ipynb and must not drift from it; it opens with the quickstart and links
the papers the code implements, as the mechanism notebooks' introductions and CITATION.cff do."""
import configparser
import json
import re

import yaml
from xsa_nb.docs import readme_from_index

from conftest import ROOT

QUICKSTART = ["make install", "make test", "make reproduce"]  # the README's first code block, one command a line
PAPERS = {  # what the repository implements or builds on: where it is linked
    "Exclusive Self Attention": "https://arxiv.org/abs/2603.09078",
    "Attention Residuals": "https://arxiv.org/abs/2603.15031",
    "Delta Attention Residuals": "https://arxiv.org/abs/2605.18855",
    "Muon": "https://kellerjordan.github.io/posts/muon/",
    "Polar Express": "https://arxiv.org/abs/2505.16932",
    "nanochat": "https://github.com/karpathy/nanochat",
}
INTRODUCTIONS = {  # the notebook whose subject a paper is: its introduction links it
    "01_xsa": ["Exclusive Self Attention"],
    "02_muon": ["Muon", "Polar Express"],
    "03_routing": ["Attention Residuals", "Delta Attention Residuals"],
}


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def settings() -> configparser.SectionProxy:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "settings.ini")
    return parser["DEFAULT"]


def test_readme_matches_index():
    expected = readme_from_index(ROOT / "nbs" / "00_index.ipynb")
    assert readme() == expected, "README.md is out of step with nbs/00_index.ipynb: run `xsa_nb docs readme`"


def test_readme_opens_with_the_quickstart():
    "The first code block, before any section, is install, test, reproduce: one command a line."
    text = readme()
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block, "README.md has no ```bash block"
    assert "\n## " not in text[:first_block.start()], "the quickstart must come before the first section"
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == QUICKSTART, commands


def test_readme_links_every_paper():
    text = readme()
    missing = [name for name, url in PAPERS.items() if f"]({url})" not in text]
    assert not missing, f"README.md does not link {missing}"


def test_each_mechanism_notebook_links_its_papers_in_its_introduction():
    for stem, names in INTRODUCTIONS.items():
        cells = json.loads((ROOT / "nbs" / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
        intro = "".join(cells[2]["source"])  # after the default_exp cell and the title cell
        assert cells[2]["cell_type"] == "markdown" and not intro.startswith("#"), f"{stem}: cell 2 is not its introduction"
        missing = [name for name in names if f"]({PAPERS[name]})" not in intro]
        assert not missing, f"{stem}'s introduction does not link {missing}"


def test_citation_file_names_this_version_and_the_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    ini = settings()
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == ini["version"], f"CITATION.cff says {cff['version']}, settings.ini {ini['version']}"
    assert cff["license"] == "Apache-2.0" and ini["license"] == "apache2"
    assert cff["repository-code"] == ini["git_url"]
    cited = {ref.get("url") or ref.get("repository-code") for ref in cff["references"]}
    assert cited == set(PAPERS.values()), cited ^ set(PAPERS.values())


def test_license_is_the_apache_license():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "[yyyy]" not in text
