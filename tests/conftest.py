"""Shared fixtures: the repository root and the notebooks, in reading order."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
