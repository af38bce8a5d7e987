"""Every notebook, one test each, under nbdev's test rules (settings.ini `tst_flags`: cells flagged `notest` or
`slow`, and `#| eval: false` cells, are skipped). The executed copy is kept in `_exec/` for the docs build. The slow
tier (`make test-slow`) runs each notebook that has `#| slow` cells again, with them."""
import subprocess
import sys

import pytest

from conftest import NOTEBOOKS, ROOT
from xsa_nb.docs import split_directives
from execnb.nbio import read_nb

RUN = "import sys; from xsa_nb.cli import main; sys.exit(main(sys.argv[1:]))"
WITH_SLOW_CELLS = [nb for nb in NOTEBOOKS if any(c.cell_type == "code" and "slow" in split_directives(c.source)[0]
                                                 for c in read_nb(nb).cells)]


def execute(notebook, out, *flags):
    res = subprocess.run([sys.executable, "-c", RUN, "docs", "execute", str(notebook), str(out), *flags],
                         capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        pytest.fail(f"{notebook.name} failed:\n{res.stdout[-5000:]}\n{res.stderr[-20000:]}", pytrace=False)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook(notebook):
    execute(notebook, ROOT / "_exec" / notebook.name)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("notebook", WITH_SLOW_CELLS, ids=[nb.stem for nb in WITH_SLOW_CELLS])
def test_notebook_with_slow_cells(notebook):
    execute(notebook, ROOT / "_exec_slow" / notebook.name, "--slow")


def test_there_are_notebooks():
    names = [nb.stem for nb in NOTEBOOKS]
    assert names[0] == "00_index" and "10_train" in names, names


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_no_cell_mixes_imports_with_code(notebook):
    from xsa_nb.docs import cells_mixing_imports
    assert cells_mixing_imports(notebook) == [], \
        f"{notebook.name}: cells {cells_mixing_imports(notebook)} mix imports with other code (nbdev re-runs them for the docs)"
