"""Shared fixtures: the repository root and the notebooks, in reading order. `make test` spreads the tests over two
pytest-xdist workers (`-n 2 --dist loadgroup`); the docs site is built from the executed notebooks that
`test_notebooks.py` leaves in `_exec/`, so those two files share one worker (`pytestmark` in each), in that order."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT

