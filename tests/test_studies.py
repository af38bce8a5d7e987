"""Studies as a researcher meets them: `xsa_nb studies` lists every study with its question and verdicts,
`xsa_nb reproduce --help` names every preset and study with what it answers, and `--dry-run` plans each study
without training or writing anything (the tables rebuilt from records, byte for byte, are checked in 12f_studies)."""
import subprocess
import sys
from pathlib import Path

import pytest

from xsa_nb.experiments import DEFAULT_PRESET, PRESETS, STUDIES
from xsa_nb.runner import reproduce

XSA_NB = str(Path(sys.executable).parent / "xsa_nb")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([XSA_NB, *args], capture_output=True, text=True, cwd=cwd)


def test_studies_lists_every_study_with_its_question_and_verdicts():
    res = run("studies")
    assert res.returncode == 0, res.stderr
    for s in STUDIES.values():
        assert f"{s.name}{' (pre-registered)' if s.prediction else ''}: {s.question}" in res.stdout, s.name
    assert "verdicts: XSA replicates; Delta Block replicates" in res.stdout


def test_reproduce_help_names_every_preset_and_study():
    res = run("reproduce", "--help")
    assert res.returncode == 0 and f"default: {DEFAULT_PRESET}" in res.stdout, res.stdout
    for name in [*PRESETS, *STUDIES]:
        assert f"\n  {name} " in res.stdout, name


@pytest.fixture(scope="module")
def scratch_cache(tmp_path_factory):
    "A cache directory of the tests' own: a dry run keeps its measured peak and its estimate there, not in the user's."
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XSA_NB_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.mark.parametrize("name", list(STUDIES))
def test_every_study_is_planned_by_a_dry_run(name, tmp_path, scratch_cache):
    said = []
    assert reproduce(name, root=tmp_path, dry_run=True, log=said.append) == []
    assert f"{len(STUDIES[name].runs)} runs of preset {name}" in said[0], said[0][-400:]
    assert not list(tmp_path.iterdir())  # nothing written
