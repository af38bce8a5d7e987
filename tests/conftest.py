"""Shared fixtures: the repository root and the notebooks, in reading order. `make test` runs in two steps: every
test but the site's, spread over two pytest-xdist workers (`-n 2 --dist loadgroup`, the notebooks among them, each
leaving its executed copy in `_exec/`); then the site tests (marker `site`), which build the docs from those copies.
Run alone, the site tests execute whatever copy is missing or stale themselves."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT

