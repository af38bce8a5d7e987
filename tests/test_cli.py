"""The console script as a researcher uses it (`xsa_nb train`, `xsa_nb eval`, each in a fresh process): mistakes are
refused before any work, naming what is wrong, with nothing written; what the notebook refuses (data that cannot be
fetched, a full disk, a corrupt checkpoint: the states of refusal_setups) is one line too, as through papermill;
values are read as papermill reads them; each run gets a directory of its own; executed notebooks are written
atomically, so a failed run keeps the last good one; the notebook's output reaches the terminal and Jupyter's
plumbing stays quiet; files get the usual mode. The evaluation round trip, the data that cannot be fetched
and the killed run are in the slow tier (`make test-slow`)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from refusal_setups import corrupt_copy, full_disk_env, offline_env
from xsa_nb.chat_data import chat_sample_dir
from xsa_nb.experiments import run_status

XSA_NB = str(Path(sys.executable).parent / "xsa_nb")

pytestmark = pytest.mark.xdist_group("cli")  # one worker: the module fixture is built once
TINY = ["-p", "depth", "1", "-p", "steps", "4", "-p", "seq_len", "64", "-p", "device_batch_size", "4",
        "-p", "eval_every", "-1", "-p", "eval_tokens", "512", "-p", "warmup_steps", "1", "-p", "save_every", "2"]
TRAINED = [*TINY, "-p", "lr_scale", "1e-3"]  # the module fixture's run
NOISE = ("without encryption", "KeyboardInterrupt")


ENV = {k: v for k, v in os.environ.items() if k != "IN_TEST"}  # real runs, not the notebooks' test mode


def xsa_nb(*args, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    "Run the console script with `args` in `cwd`, its environment ENV with `env` added."
    return subprocess.run([XSA_NB, *map(str, args)], cwd=cwd, env=ENV | (env or {}), capture_output=True, text=True,
                          timeout=600)


def assert_refused_in_one_line(res: subprocess.CompletedProcess, message: str) -> None:
    "A refusal as `xsa_nb train` shows it: exit 2, one `error:` line holding `message`, said once, and no traceback."
    said = [line for line in res.stderr.splitlines() if line.startswith("xsa_nb train: error:")]
    assert res.returncode == 2 and len(said) == 1 and message in said[0], res.stderr[-3000:]
    both = res.stderr + res.stdout
    assert both.count(message) == 1 and "Traceback" not in both and "Refusal" not in both, both[-3000:]


def usual_mode(directory: Path) -> int:
    "The mode `open()` gives a new file in `directory` (0o666 less the umask)."
    probe = directory / ".mode-probe"
    probe.write_text("")
    mode = probe.stat().st_mode & 0o777
    probe.unlink()
    return mode


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    "A tiny run trained by `xsa_nb train` without a run_dir, from an empty working directory."
    cwd = tmp_path_factory.mktemp("cwd")
    res = xsa_nb("train", *TRAINED, cwd=cwd)
    assert res.returncode == 0, res.stderr[-5000:]
    (run,) = (cwd / "runs").iterdir()
    return cwd, run, res


@pytest.mark.parametrize("args, said", [
    (["train", "-p", "xsa_alpah", "1.0"], "unknown parameter 'xsa_alpah' (did you mean 'xsa_alpha'?)"),
    (["train", "-p", "xsa_alpha", "abc"], "xsa_alpha: could not read 'abc' as a number"),
    (["eval", "runs/missing"], "run_dir 'runs/missing' does not exist"),
    (["eval", "runs/a", "-p", "run_dir", "runs/b"], "run_dir given twice: 'runs/a' (the argument) and 'runs/b'"),
    (["train", "-p", "device", "cuda:99"], "device 'cuda:99' is not available on this machine; available: auto, cpu"),
    (["reproduce", "--preset", "bogus", "--dry-run"], "invalid choice: 'bogus'"),
])
def test_mistakes_are_refused_before_any_work(tmp_path, args, said):
    res = xsa_nb(*args, cwd=tmp_path)
    assert res.returncode == 2 and said in res.stderr, res.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # no run directory, no notebook, nothing


def test_values_are_read_as_papermill_reads_them(trained):
    _, run, _ = trained
    assert json.loads((run / "config.json").read_text())["lr_scale"] == 0.001  # `1e-3`, a float (YAML: a string)


def test_each_run_gets_a_fresh_directory_with_its_notebook(trained):
    _, run, res = trained
    assert re.fullmatch(r"\d{8}-\d{6}-d1", run.name), run.name
    assert (run / "train.ipynb").is_file() and not list(run.glob("train.*.ipynb"))
    assert f"trained runs/{run.name}: 4 steps" in res.stdout, res.stdout


def test_jupyter_plumbing_is_quiet(trained):
    _, _, res = trained
    for noise in NOISE:
        assert noise not in res.stderr + res.stdout, res.stderr[-3000:]


def test_files_get_the_usual_mode(trained):
    _, run, _ = trained
    mode = usual_mode(run)
    for name in ("config.json", "summary.json", "metrics.jsonl", "train.ipynb", "loss.png",
                 "checkpoint/model.safetensors", "checkpoint/optimizer.safetensors", "checkpoint/meta.json"):
        assert (run / name).stat().st_mode & 0o777 == mode, (name, oct((run / name).stat().st_mode), oct(mode))


@pytest.mark.slow
def test_eval_prints_its_results_and_a_failed_eval_keeps_the_good_notebook(trained):
    cwd, run, _ = trained
    res = xsa_nb("eval", run, "-p", "eval_tokens", "512", cwd=cwd)
    assert res.returncode == 0, res.stderr[-5000:]
    notebook_said, results = res.stdout.split("results of")  # the notebook's own output came first, as it ran
    bpb = json.loads((run / "eval.json").read_text())["val_bpb"]
    assert f"val bpb {bpb:.4f}" in notebook_said and f"val bpb {bpb:.4f}" in results, res.stdout
    assert "cos(y_i, v_i) before XSA" in results, res.stdout
    assert not any(noise in res.stderr for noise in NOISE), res.stderr[-3000:]
    assert (run / "eval.json").stat().st_mode & 0o777 == usual_mode(run)
    good = (run / "eval.ipynb").read_bytes()
    (cwd / "empty").mkdir()  # exists, so it passes validation; holds no shards, so the notebook fails on it
    res = xsa_nb("eval", run, "-p", "extra_data_dir", cwd / "empty", cwd=cwd)
    assert res.returncode == 1 and "eval.failed.ipynb" in res.stderr, res.stderr[-3000:]
    assert (run / "eval.ipynb").read_bytes() == good
    assert "extra_data_dir" in (run / "eval.failed.ipynb").read_text()


def test_a_dry_run_prints_its_plan_and_writes_nothing(tmp_path):
    res = xsa_nb("train", "-p", "depth", "2", "-p", "dry_run", "True", cwd=tmp_path)
    assert res.returncode == 0 and "steps" in res.stdout, res.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


def test_another_configuration_is_refused_before_any_work(trained):
    cwd, run, _ = trained
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    res = xsa_nb("train", *TRAINED, "-p", "depth", "2", "-p", "run_dir", run, cwd=cwd)  # not the run's config
    assert res.returncode == 2 and "differs in ['depth']: depth: 1 stored, 2 asked" in res.stderr, res.stderr[-3000:]
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before  # nothing touched


def test_a_failed_training_keeps_the_good_notebook(trained):
    cwd, run, _ = trained
    again = cwd / "again"  # the same run, to be trained afresh: its checkpoint and summary removed
    shutil.copytree(run, again, ignore=shutil.ignore_patterns("checkpoint", "summary.json"))
    good = (again / "train.ipynb").read_bytes()
    res = xsa_nb("train", *TRAINED, "-p", "run_dir", again, "-p", "nan_at_step", "1", cwd=cwd)  # fails at step 1
    assert res.returncode == 1 and "train.failed.ipynb" in res.stderr, res.stderr[-3000:]
    assert (again / "train.ipynb").read_bytes() == good and (again / "train.failed.ipynb").is_file()


def test_a_long_cpu_run_is_refused_in_one_line_and_debug_shows_the_traceback(tmp_path):
    "The README's GPU command on a CPU: one line naming the estimate and what to do, no traceback, exit 2."
    res = xsa_nb("train", "-p", "depth", "24", cwd=tmp_path)
    assert_refused_in_one_line(res, "estimated at")
    debug = subprocess.run([XSA_NB, "train", "-p", "depth", "24", "-p", "dry_run", "False"], capture_output=True,
                           text=True, cwd=tmp_path, env=ENV | {"XSA_NB_DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr, debug.stderr[-3000:]


def test_a_run_refused_inside_its_notebook_leaves_nothing_behind(tmp_path):
    (tmp_path / "empty").mkdir()  # a directory, so it passes validation; no shards, so the training refuses it
    res = xsa_nb("train", *TINY, "-p", "data_dir", tmp_path / "empty", cwd=tmp_path)
    assert res.returncode == 1 and "failed.ipynb" not in res.stderr, res.stderr[-3000:]
    assert list(tmp_path.glob("runs/*")) == []  # no run directory: neither the lock it took nor its failed notebook


@pytest.mark.slow
def test_data_that_cannot_be_fetched_is_refused_in_one_line(tmp_path):
    "Offline, a run pointed at the ClimbMix cache: one line naming what is missing and the command that fetches it."
    res = xsa_nb("train", *TINY, "-p", "data_dir", tmp_path / "cache" / "climbmix", cwd=tmp_path,
                 env=offline_env(tmp_path))
    assert_refused_in_one_line(res, "missing, and could not be fetched")
    assert "xsa_nb data download climbmix -n 8" in res.stderr, res.stderr[-3000:]


def test_a_full_disk_is_refused_in_one_line_with_how_to_resume(tmp_path):
    run = tmp_path / "run"
    res = xsa_nb("train", *TINY, "-p", "run_dir", run, cwd=tmp_path, env=full_disk_env(tmp_path))
    assert_refused_in_one_line(res, f"no space left on the device holding {run}")
    assert f"run again with -p run_dir {run} to resume" in res.stderr, res.stderr[-3000:]


def test_a_corrupt_checkpoint_is_refused_in_one_line(trained):
    cwd, run, _ = trained
    corrupt = corrupt_copy(run, cwd / "corrupt")  # unfinished, so the same command resumes from its checkpoint
    res = xsa_nb("train", *TRAINED, "-p", "run_dir", corrupt, cwd=cwd)
    assert_refused_in_one_line(res, "is corrupt or truncated")


@pytest.mark.slow
def test_a_failed_chatcore_leaves_the_run_trained_not_complete(trained):
    cwd, run, _ = trained
    again, broken = cwd / "chat_failed", cwd / "chat"
    shutil.copytree(run, again, ignore=shutil.ignore_patterns("eval*"))
    shutil.copytree(chat_sample_dir(), broken)
    (broken / "arc_easy" / "test" / "data.jsonl").write_text("not json\n")  # there, so it is accepted; unreadable
    for chat_dir, code, said in [("/nonexistent", 2, "xsa_nb eval: error: chat_dir '/nonexistent' does not exist"),
                                 (broken, 1, "not valid JSON")]:  # refused before any work; fails after the rest
        res = xsa_nb("eval", again, "-p", "eval_tokens", "512", "-p", "chat_dir", chat_dir, cwd=cwd)
        assert res.returncode == code and said in res.stderr, res.stderr[-3000:]
        assert not (again / "eval.json").exists() and run_status(again) == "trained"  # reproduce evaluates it again


def test_a_missing_chat_dir_is_refused_in_one_line_before_any_work(tmp_path):
    """`xsa_nb eval` checks a chat_dir with the rest of the configuration (validate_eval_config): a missing one is
    refused in one line naming it, exit 2, and no notebook runs (before, 11_eval refused it inside: exit 1)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")  # a finished run, as far as validation looks
    res = xsa_nb("eval", run, "-p", "chat_dir", tmp_path / "nochat", cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    assert res.stderr.strip().splitlines() == [f"xsa_nb eval: error: chat_dir '{tmp_path / 'nochat'}' does not exist "
                                               "or is not a directory: give a chat data directory (xsa_nb.chat_data "
                                               "layout), or '' to skip ChatCORE"]
    assert sorted(p.name for p in run.iterdir()) == ["summary.json"]  # no eval.ipynb, no lock: nothing ran


@pytest.mark.slow
def test_a_killed_run_leaves_a_failed_notebook_not_a_running_one(tmp_path):
    # 5000 steps of one 256-token batch: long enough to be killed mid-run, yet under one pass over the embedded corpus
    # (more passes are refused); its CPU-time estimate depends on the machine, so no refusal
    proc = subprocess.Popen([XSA_NB, "train", *TINY, "-p", "steps", "5000", "-p", "total_batch_size", "256",
                             "-p", "max_cpu_hours", "0", "-p", "run_dir", "run"],
                            cwd=tmp_path,
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics, deadline = tmp_path / "run" / "metrics.jsonl", time.time() + 300
    while proc.poll() is None and time.time() < deadline and not (metrics.exists() and metrics.read_text().strip()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, proc.stderr.read()[-3000:]
    assert sorted(p.name for p in (tmp_path / "run").glob("train*.ipynb")) == ["train.failed.ipynb"]


def test_reproduce_help_lists_each_preset_and_study_with_its_question_and_time_here(tmp_path, monkeypatch):
    """`reproduce --help` has a row per preset and study with what it answers; once a dry run here has estimated a
    preset, its row shows that time (kept in the cache directory: the help plans nothing), and one line says how the
    others get theirs. (Before any dry run, the rows without times: 90_cli.)"""
    from xsa_nb.cli import PRESET_WHAT
    from xsa_nb.experiments import PRESETS, STUDIES
    from xsa_nb.recipe import duration_text
    from xsa_nb.runner import kept_estimates

    monkeypatch.setenv("XSA_NB_CACHE", str(tmp_path / "cache"))
    env = ENV | {"XSA_NB_CACHE": str(tmp_path / "cache")}
    dry = subprocess.run([XSA_NB, "reproduce", "--preset", "smoke", "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr[-3000:]
    said = subprocess.run([XSA_NB, "reproduce", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    smoke = f"≥ {duration_text(kept_estimates()['smoke']['seconds'])}"  # the dry run's total; its fine-tuning unplanned
    for name, what in [*((n, PRESET_WHAT[n]) for n in PRESETS), *((n, s.question) for n, s in STUDIES.items())]:
        time = smoke if name == "smoke" else ""  # no dry run of the others here
        assert f"\n  {name:<20} {time:>{len(smoke)}}  {what}\n" in said, (name, said)
    assert f"times: as this machine's last `xsa_nb reproduce --preset NAME --dry-run` estimated them (kept in {tmp_path}/cache/" in said
