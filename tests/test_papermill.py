"""The training and evaluation notebooks run under papermill: values given with -p really reach them, a short CPU
run writes a complete run directory whose loss decreases, and bad parameters fail before any work."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SMALL = ["-p", "seq_len", "64", "-p", "device_batch_size", "4", "-p", "total_batch_size", "256", "-p", "eval_every", "10", "-p", "eval_tokens", "1024",
         "-p", "warmup_steps", "2", "-p", "save_every", "10"]


def papermill(notebook, out, *params):
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"}  # a real run, not the notebook's test mode
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / notebook), str(out), *params]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "d2"
    res = papermill("10_train.ipynb", run.parent / "train.ipynb", "-p", "depth", "2", "-p", "steps", "20",
                    "-p", "run_dir", str(run), *SMALL)
    assert res.returncode == 0, res.stderr[-5000:]
    return run


def test_parameters_arrive_and_a_run_directory_is_written(trained):
    assert json.loads((trained / "config.json").read_text())["depth"] == 2
    nb = json.loads((trained.parent / "train.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "depth = 2" in "".join(injected[0]["source"])
    for name in ("metrics.jsonl", "summary.json", "loss.png", "checkpoint/model.safetensors", "checkpoint/optimizer.pt"):
        assert (trained / name).is_file(), name


def test_loss_decreases(trained):
    lines = [json.loads(l) for l in (trained / "metrics.jsonl").read_text().splitlines()]
    loss = [m["loss"] for m in lines if "loss" in m]
    assert len(loss) == 20
    assert sum(loss[-5:]) / 5 < sum(loss[:5]) / 5 - 0.5, loss


def test_eval_notebook_writes_eval_json(trained):
    res = papermill("11_eval.ipynb", trained / "eval.ipynb", "-p", "run_dir", str(trained), "-p", "eval_tokens", "1024")
    assert res.returncode == 0, res.stderr[-5000:]
    ev = json.loads((trained / "eval.json").read_text())
    assert 0 < ev["val_bpb"] < 10 and len(ev["attention"]["cos_before"]) == 2
    assert (trained / "attention.png").is_file()


def test_every_trainer_knob_is_a_parameter():
    from xsa_nb.trainer import TrainConfig
    import dataclasses
    nb = json.loads((ROOT / "nbs" / "10_train.ipynb").read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, "exactly one cell of 10_train must carry the papermill `parameters` tag"
    names = {line.split("=")[0].strip() for line in "".join(tagged[0]["source"]).splitlines() if "=" in line}
    assert names == {f.name for f in dataclasses.fields(TrainConfig)}


@pytest.mark.parametrize("param, value, message", [
    ("depth", "0", "depth must be an integer >= 1, got 0"),
    ("xsa_alpha", "1.5", "xsa_alpha must lie in [0, 1], got 1.5"),
    ("residual", "highway", "residual must be one of"),
    ("data_dir", "/no/such/dir", "data_dir '/no/such/dir' does not exist"),
])
def test_bad_parameters_fail_before_any_work(tmp_path, param, value, message):
    res = papermill("10_train.ipynb", tmp_path / "out.ipynb", "-p", param, value, "-p", "run_dir", str(tmp_path / "run"))
    assert res.returncode != 0
    assert message in res.stderr + res.stdout
    assert not (tmp_path / "run").exists()
