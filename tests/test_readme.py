"""README.md is generated from nbs/00_index.ipynb and must not drift from it."""
from xsa_nb.docs import readme_from_index

from conftest import ROOT


def test_readme_matches_index():
    expected = readme_from_index(ROOT / "nbs" / "00_index.ipynb")
    assert (ROOT / "README.md").read_text(encoding="utf-8") == expected, \
        "README.md is out of step with nbs/00_index.ipynb: run `xsa_nb docs readme`"


def test_readme_has_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make test" in text and "make reproduce" in text
