"""The training and evaluation notebooks run under papermill: values given with -p really reach them, a short CPU
run writes a complete run directory whose loss decreases, a run without run_dir gets a fresh directory, and bad
parameters (a misspelt name, an unreadable value, an invalid one) fail before any work. Every refusal — a bad
parameter, a long CPU run, data that cannot be fetched, another configuration in the run directory, a full disk —
ends papermill's output with its one line and no traceback through our code (`XSA_NB_DEBUG=1` shows it). Two runs
without a run_dir train twice, so that test is in the slow tier (`make test-slow`)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from refusal_setups import corrupt_copy, full_disk_env, offline_env

pytestmark = pytest.mark.xdist_group("papermill")  # one worker: the module fixture is built once

SMALL = ["-p", "seq_len", "64", "-p", "device_batch_size", "4", "-p", "total_batch_size", "256", "-p", "eval_every", "10", "-p", "eval_tokens", "1024",
         "-p", "warmup_steps", "2", "-p", "save_every", "10"]


def papermill(notebook, out, *params, cwd=None, threads=None, env=None):
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"} | (env or {})  # a real run, not the test mode
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / notebook), str(out), *params]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)


def assert_refused(res, message):
    """A refusal as papermill shows it: non-zero, and the kernel's part of its error is the one line `Refusal: ...`
    holding `message`, with no frame of the notebook or of xsa_nb. (Above it stand papermill's own frames: its command
    line does not catch the error it raises for any failed notebook; `xsa_nb train` prints the line alone.)"""
    said = res.stderr + res.stdout
    assert res.returncode != 0, said[-3000:]
    kernel = said.partition("Exception encountered at ")[2].strip().splitlines()
    assert len(kernel) == 2 and kernel[1].startswith("Refusal: ") and message in kernel[1], said[-3000:]
    assert said.count(message) == 1 and "Cell In[" not in said and "xsa_nb/" not in said, said[-3000:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "d2"
    # 256 tokens a step: the recipe's rates are nanochat's × √(256 / 2^19) ≈ 1/45; ×32 lets 20 steps show learning
    # on one thread: at these rates a 20-step run is chaotic, and the order of a product's sums (the thread count) can
    # decide whether it learns (at two threads it once ended above its start)
    res = papermill("10_train.ipynb", run.parent / "train.ipynb", "-p", "depth", "2", "-p", "steps", "20",
                    "-p", "lr_scale", "32", "-p", "run_dir", str(run), *SMALL, threads=1)
    assert res.returncode == 0, res.stderr[-5000:]
    assert "Unable to parse" not in res.stderr, res.stderr  # papermill's parameter parser read every line
    return run


def test_parameters_arrive_and_a_run_directory_is_written(trained):
    assert json.loads((trained / "config.json").read_text())["depth"] == 2
    nb = json.loads((trained.parent / "train.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "depth = 2" in "".join(injected[0]["source"])
    for name in ("metrics.jsonl", "summary.json", "loss.png", "checkpoint/model.safetensors",
                 "checkpoint/optimizer.safetensors", "checkpoint/state.json"):
        assert (trained / name).is_file(), name


def test_loss_decreases(trained):
    lines = [json.loads(l) for l in (trained / "metrics.jsonl").read_text().splitlines()]
    loss = [m["loss"] for m in lines if "loss" in m]
    assert len(loss) == 20
    assert sum(loss[-5:]) / 5 < sum(loss[:5]) / 5 - 0.5, loss


def test_eval_notebook_writes_eval_json(trained):
    res = papermill("11_eval.ipynb", trained / "eval.ipynb", "-p", "run_dir", str(trained), "-p", "eval_tokens", "1024")
    assert res.returncode == 0, res.stderr[-5000:]
    assert "Unable to parse" not in res.stderr, res.stderr
    ev = json.loads((trained / "eval.json").read_text())
    assert 0 < ev["val_bpb"] < 10 and len(ev["attention"]["cos_before"]) == 2
    assert (trained / "attention.png").is_file()


@pytest.mark.parametrize("notebook, config", [("10_train", "TrainConfig"), ("14_sft", "SFTConfig")])
def test_every_option_is_a_parameter_with_its_default_and_help(notebook, config):
    """A run notebook's parameters cell is its configuration, option for option: the same names, defaults and help,
    in order (regenerate it with `xsa_nb.config.parameters_source(<config>)` after adding an option)."""
    from xsa_nb import config as configs
    nb = json.loads((ROOT / "nbs" / f"{notebook}.ipynb").read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, f"exactly one cell of {notebook} must carry the papermill `parameters` tag"
    assert "".join(tagged[0]["source"]) == configs.parameters_source(getattr(configs, config)), \
        f"{notebook}'s parameters cell differs from {config}: paste xsa_nb.config.parameters_source({config}) into it"


@pytest.mark.parametrize("notebook", ["10_train.ipynb", "11_eval.ipynb", "14_sft.ipynb"])
def test_papermill_reads_every_parameter_line_without_a_warning(notebook, caplog):
    """papermill's own parser (run on every execution, and by `xsa_nb` to type `-p` values) finds each line of the
    parameters cell with its default and help, and warns about none: a second `=` on a line (one in a help comment,
    say) makes it print "Unable to parse line" and drop that parameter."""
    import ast
    import logging
    import papermill as pm
    nb = json.loads((ROOT / "nbs" / notebook).read_text())
    (cell,) = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    expected = {}
    for line in "".join(cell["source"]).splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            (assign,) = ast.parse(line).body
            expected[assign.targets[0].id] = (ast.get_source_segment(line, assign.value), line.partition("  # ")[2])
    with caplog.at_level(logging.DEBUG, logger="papermill"):
        found = pm.inspect_notebook(str(ROOT / "nbs" / notebook))
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert {name: (p["default"], p["help"]) for name, p in found.items()} == expected


def test_every_eval_option_is_a_parameter_with_its_default():
    from xsa_nb.params import notebook_params
    from xsa_nb.eval import EvalConfig
    import dataclasses
    params = notebook_params(ROOT / "nbs" / "11_eval.ipynb")
    assert {k: p["default"] for k, p in params.items()} == dataclasses.asdict(EvalConfig())


@pytest.mark.parametrize("notebook, param, value, message", [
    ("10_train.ipynb", "depth", "0", "depth must be an integer >= 1, got 0"),
    ("10_train.ipynb", "data_dir", "/no/such/dir", "data_dir '/no/such/dir' does not exist"),
    ("10_train.ipynb", "stepz", "3", "unknown parameter 'stepz' (did you mean 'steps'?)"),
    ("10_train.ipynb", "xsa_alpha", "abc", "xsa_alpha: could not read 'abc' as a number"),
    ("11_eval.ipynb", "run_dir", "runs/missing", "run_dir 'runs/missing' does not exist"),
    ("14_sft.ipynb", "mmlu_epochs", "-1", "mmlu_epochs must be an integer >= 0, got -1"),
    ("14_sft.ipynb", "init_lr_frac", "abc", "init_lr_frac: could not read 'abc' as a number"),
    ("14_sft.ipynb", "init_from", "runs/none", "init_from 'runs/none' holds no finished base run"),
])
def test_bad_parameters_fail_before_any_work(tmp_path, notebook, param, value, message):
    res = papermill(notebook, "out.ipynb", "-p", param, value, cwd=tmp_path)
    assert_refused(res, message)
    assert [p.name for p in tmp_path.iterdir()] == ["out.ipynb"]  # papermill's record of the failure, nothing else


@pytest.mark.slow
def test_runs_without_run_dir_do_not_collide(tmp_path):
    """The README's papermill line names no run_dir: two such runs with different configurations each get a fresh
    directory (they used to share runs/default, where the second was refused)."""
    for depth in ("1", "2"):
        res = papermill("10_train.ipynb", f"d{depth}.ipynb", "-p", "depth", depth, "-p", "steps", "2", *SMALL, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-5000:]
    runs = sorted((tmp_path / "runs").iterdir())
    assert [json.loads((r / "config.json").read_text())["depth"] for r in runs] == [1, 2], runs


def test_gated_xsa_trains_on_the_plain_kernels(tmp_path):
    """`-p kernels plain` and `-p xsa_gate True` are training options: a run through papermill trains a gated XSA
    model on the plain (autograd) paths, and its settings and checkpoint say so (the gates are parameters)."""
    from safetensors import safe_open
    run = tmp_path / "plain"
    res = papermill("10_train.ipynb", tmp_path / "train.ipynb", "-p", "depth", "2", "-p", "steps", "2",
                    "-p", "xsa_alpha", "1.0", "-p", "xsa_gate", "True", "-p", "kernels", "plain", "-p", "run_dir",
                    str(run), *SMALL)
    assert res.returncode == 0, res.stderr[-5000:]
    settings = json.loads((run / "summary.json").read_text())["settings"]
    assert (settings["kernels"], settings["xsa_gate"], settings["xsa_alpha"]) == ("plain", True, 1.0)
    with safe_open(str(run / "checkpoint" / "model.safetensors"), "pt") as f:
        assert {k for k in f.keys() if k.endswith("xsa_gate")} == {f"transformer.h.{i}.attn.xsa_gate" for i in range(2)}


def test_a_gpu_sized_run_on_a_cpu_is_refused_within_seconds(tmp_path):
    """The README's GPU command on a CPU machine: refused before any work with its estimate (hours), naming the dry
    run and the override; no run directory is left (the override itself is the next test)."""
    import time
    t0 = time.perf_counter()
    cache = {"XSA_NB_CACHE": str(tmp_path / "cache")}  # the matmul peak measured and kept there, not in ~/.cache
    res = papermill("10_train.ipynb", "out.ipynb", "-p", "depth", "24", cwd=tmp_path, env=cache)
    assert time.perf_counter() - t0 < 120
    assert_refused(res, "-p max_cpu_hours 0")
    said = res.stderr + res.stdout
    assert "estimated at" in said and " h on the CPU" in said and "-p dry_run True" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "out.ipynb"]  # no runs/ directory


@pytest.mark.slow
def test_the_dry_run_prints_its_plan_with_the_refusals_estimate(tmp_path):
    """`-p dry_run True` prints the plan where the command was typed (not only into the output notebook), and its
    time is the refusal's: the matmul peak is measured once per machine and kept in the cache directory."""
    cache = {"XSA_NB_CACHE": str(tmp_path / "cache")}
    said = papermill("10_train.ipynb", "out.ipynb", "-p", "depth", "24", cwd=tmp_path, env=cache).stderr
    plan = papermill("10_train.ipynb", "plan.ipynb", "-p", "depth", "24", "-p", "dry_run", "True", cwd=tmp_path, env=cache)
    assert plan.returncode == 0, plan.stderr[-3000:]
    estimate = said.split("estimated at ")[1].split(" on the CPU")[0]
    assert "recipe:" in plan.stderr and f"≈ {estimate}\n" in plan.stderr, (estimate, plan.stderr[-2000:])


def test_the_length_check_lets_a_run_through_with_the_override():
    from xsa_nb.config import TrainConfig
    from xsa_nb.recipe import check_run_length
    big = TrainConfig(depth=24, device="cpu")
    with pytest.raises(ValueError, match="over max_cpu_hours=2"):
        check_run_length(big)
    plan = check_run_length(TrainConfig(depth=24, device="cpu", max_cpu_hours=0))
    assert plan["estimated_seconds"] > 2 * 3600


def test_the_debug_variable_shows_the_traceback(tmp_path):
    res = papermill("10_train.ipynb", "out.ipynb", "-p", "depth", "0", cwd=tmp_path, env={"XSA_NB_DEBUG": "1"})
    said = res.stderr + res.stdout
    assert res.returncode != 0 and "depth must be an integer >= 1, got 0" in said
    assert "Cell In[" in said and "xsa_nb/config.py" in said and "Refusal" in said, said[-3000:]


def test_papermills_error_for_a_refusal_is_its_one_line(tmp_path, monkeypatch):
    """What a program calling papermill (`xsa_nb train`, `reproduce`) catches: the `PapermillExecutionError` of a
    refused notebook holds the Refusal's one line — the kernel rendered it through `Refusal._render_traceback_` —
    and no traceback through the notebook or xsa_nb."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    monkeypatch.delenv("IN_TEST", raising=False)
    monkeypatch.delenv("XSA_NB_DEBUG", raising=False)
    with pytest.raises(PapermillExecutionError) as caught:
        papermill.execute_notebook(str(ROOT / "nbs" / "10_train.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"depth": 0}, cwd=str(tmp_path), progress_bar=False)
    e, message = caught.value, "depth must be an integer >= 1, got 0"
    assert (e.ename, e.evalue, e.traceback) == ("Refusal", message, [f"Refusal: {message}"]), e.traceback
    assert "Traceback (most recent call last)" not in str(e) and str(e).strip().endswith(f"Refusal: {message}"), str(e)


def test_a_run_directory_of_another_configuration_is_refused(tmp_path):
    from xsa_nb.config import TrainConfig
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(TrainConfig(depth=3, run_dir=str(run)).to_dict()))
    res = papermill("10_train.ipynb", "out.ipynb", "-p", "depth", "2", "-p", "run_dir", str(run), cwd=tmp_path)
    assert_refused(res, "holds a run made with another configuration (differs in ['depth']: depth: 3 stored, 2 asked)")


@pytest.mark.slow
def test_data_that_cannot_be_fetched_is_refused(tmp_path):
    """Offline (every download through a proxy that refuses connections), a run pointed at the ClimbMix cache names
    what is missing, the command that fetches it, and the explicit paths or the embedded corpus instead."""
    res = papermill("10_train.ipynb", "out.ipynb", "-p", "depth", "1", "-p", "steps", "2", "-p", "data_dir",
                    str(tmp_path / "cache" / "climbmix"), *SMALL, cwd=tmp_path, env=offline_env(tmp_path))
    assert_refused(res, "missing, and could not be fetched")
    said = res.stderr + res.stdout
    assert "xsa_nb data download climbmix -n 8" in said and "-p data_dir '' -p tokenizer_path '' for the embedded corpus" in said


def test_a_full_disk_is_refused_with_how_to_resume(tmp_path):
    "The kernel's every atomic write (config.json, then the checkpoint) fails as on a full disk (full_disk_env)."
    run = tmp_path / "run"
    res = papermill("10_train.ipynb", "out.ipynb", "-p", "depth", "1", "-p", "steps", "2", "-p", "run_dir", str(run),
                    *SMALL, cwd=tmp_path, env=full_disk_env(tmp_path))
    assert_refused(res, f"no space left on the device holding {run}")
    assert f"run again with -p run_dir {run} to resume" in res.stderr


def test_a_corrupt_checkpoint_is_refused(trained, tmp_path):
    run = corrupt_copy(trained, tmp_path / "run")  # unfinished, so the same command resumes from its checkpoint
    res = papermill("10_train.ipynb", "out.ipynb", "-p", "depth", "2", "-p", "steps", "20", "-p", "lr_scale", "32",
                    "-p", "run_dir", str(run), *SMALL, cwd=tmp_path, threads=1)
    assert_refused(res, "is corrupt or truncated")
