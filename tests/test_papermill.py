"""The training notebook is a papermill notebook: values given with -p really reach it."""
import json
import subprocess
import sys

from conftest import ROOT


def run_papermill(tmp_path, *params):
    out = tmp_path / "out.ipynb"
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / "10_train.ipynb"), str(out), "--cwd", str(ROOT / "nbs"),
           "-p", "run_dir", str(tmp_path / "run"), *params]
    return subprocess.run(cmd, capture_output=True, text=True), out


def test_parameters_arrive(tmp_path):
    res, out = run_papermill(tmp_path, "-p", "depth", "2")
    assert res.returncode == 0, res.stderr[-5000:]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["depth"] == 2
    nb = json.loads(out.read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "depth = 2" in "".join(injected[0]["source"])


def test_parameters_cell_is_tagged():
    nb = json.loads((ROOT / "nbs" / "10_train.ipynb").read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, "exactly one cell of 10_train must carry the papermill `parameters` tag"


def test_bad_parameter_fails_with_a_clear_message(tmp_path):
    res, _ = run_papermill(tmp_path, "-p", "depth", "0")
    assert res.returncode != 0
    assert "depth must be an integer >= 1, got 0" in res.stderr + res.stdout
    assert not (tmp_path / "run" / "config.json").exists()
