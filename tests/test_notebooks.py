"""Every notebook, one test each, under nbdev's test rules (settings.ini `tst_flags`: cells flagged `notest` or
`slow`, and `#| eval: false` cells, are skipped). The executed copy is kept in `_exec/` for the docs build."""
import subprocess
import sys

import pytest

from conftest import NOTEBOOKS, ROOT

RUN = "import sys; from xsa_nb.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook(notebook):
    res = subprocess.run([sys.executable, "-c", RUN, "docs", "execute", str(notebook), str(ROOT / "_exec" / notebook.name)],
                         capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        pytest.fail(f"{notebook.name} failed:\n{res.stdout[-5000:]}\n{res.stderr[-20000:]}", pytrace=False)


def test_there_are_notebooks():
    names = [nb.stem for nb in NOTEBOOKS]
    assert names[0] == "00_index" and "10_train" in names, names


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_no_cell_mixes_imports_with_code(notebook):
    from xsa_nb.docs import cells_mixing_imports
    assert cells_mixing_imports(notebook) == [], \
        f"{notebook.name}: cells {cells_mixing_imports(notebook)} mix imports with other code (nbdev re-runs them for the docs)"
