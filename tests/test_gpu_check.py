"""The prepared device script, rehearsed on the CPU: every stage runs its CPU path with tiny sizes and writes its
files (what cannot run without a GPU — bf16 autocast, compilation, FlexAttention's backward, the study's shapes —
is what the real call measures). The rehearsal hides what the device image lacks, rustbpe included."""
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT


# The device image has PyTorch and the scientific stack but none of the notebook tools, and no rustbpe: hidden here.
ABSENT_ON_DEVICE = ("nbdev", "fastcore", "execnb", "papermill", "nbformat", "nbclient", "jupyter_client", "ipykernel",
                    "IPython", "jupytext", "submitit", "wandb", "rustbpe")
HIDE_MODULES = """import sys
class HideAbsent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the device image)", name=name)
sys.meta_path.insert(0, HideAbsent())
"""


def device_env(tmp_path: Path, absent: tuple[str, ...] = ABSENT_ON_DEVICE) -> dict:
    "The environment of a rehearsal: this Python as `python3`, `absent` unimportable, $OUT an empty folder."
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE_MODULES.format(absent=absent))
    (tmp_path / "out").mkdir()
    python_dir = str(Path(sys.executable).parent)  # the script calls `python3`: this environment's, as on the device
    return dict(os.environ, OUT=str(tmp_path / "out"), TMPDIR=str(tmp_path), OMP_NUM_THREADS="1",
                PATH=f"{python_dir}:{os.environ['PATH']}", PYTHONPATH=str(site))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 90 s on a core of its own; more on a loaded machine
def test_the_device_script_runs_every_stage_of_its_cpu_rehearsal_without_rustbpe(tmp_path):
    env = device_env(tmp_path)
    for module in ("nbdev", "rustbpe"):  # the hiding works
        hidden = subprocess.run(["python3", "-c", f"import {module}"], capture_output=True, text=True, env=env)
        assert hidden.returncode != 0 and "absent on the device image" in hidden.stderr, module
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--cpu"], capture_output=True, text=True,
                         env=env, timeout=1700)
    assert res.returncode == 0 and "tar:" not in res.stdout + res.stderr, res.stdout[-3000:] + res.stderr[-3000:]
    back = sorted(p.name for p in (tmp_path / "out").iterdir())  # one archive and one log, named for date and device
    assert len(back) == 2 and back[0].endswith("-cpu.log") and back[1] == back[0].replace(".log", ".tgz"), back
    log = (tmp_path / "out" / back[0]).read_text()
    assert [line.split()[2] for line in log.splitlines() if line.startswith("== stage")] == \
        ["env", "d24", "attention", "pairs", "bench"], log
    with tarfile.open(tmp_path / "out" / back[1]) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "got", filter="data")
    assert not [n for n in names if "checkpoint" in n], names
    got = tmp_path / "got" / back[0].removesuffix(".log")
    for name in ("env.txt", "d24_probe.md", "d24_probe.json", "attention.json", "xsa_dot.json", "gpu/pairs/pairs.json",
                 "gpu/pairs/verdicts.md", "gpu/pairs/runs/d1_base_s0/summary.json", "gpu/pairs/runs/d1_xsa_s0/metrics.jsonl",
                 "gpu_bench.md", "gpu_bench.json"):
        assert (got / name).is_file(), name
    pairs = json.loads((got / "gpu" / "pairs" / "pairs.json").read_text())
    assert pairs["pairs_run"] >= 1 and pairs["stopped"] == "the budget", pairs
    probe = json.loads((got / "d24_probe.json").read_text())
    assert [(r["shape"], r["why"]) for r in probe["rows"][:2]] == \
        [("study_d24", "the preset's rows"), ("nanochat_d24", "the preset's rows")], probe["rows"]
    assert all(r["peak_bytes"] > r["fixed_bytes"] > 0 and "error" not in r for r in probe["rows"]), probe["rows"]
    attention = json.loads((got / "attention.json").read_text())
    assert {r["backend"] for r in attention["rows"]} == {"sdpa", "flex"}
    assert all(r["out_diff"] < 1e-4 for r in attention["rows"])
    forms = json.loads((got / "xsa_dot.json").read_text())
    assert [r["form"] for r in forms] == ["multiply-sum", "bmm"] and forms[0]["max_diff"] < 1e-4


def test_the_device_script_stops_in_seconds_naming_what_is_missing(tmp_path):
    env = device_env(tmp_path, ABSENT_ON_DEVICE + ("tiktoken",))
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--cpu"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 3 and "missing, nothing was run" in res.stderr and "import tiktoken" in res.stderr, \
        res.stdout + res.stderr
    assert "== stage" not in res.stdout
    back = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(back) == 2 and "tiktoken" in (tmp_path / "out" / back[0]).read_text(), back  # the log says so too


def test_the_device_script_refuses_unknown_arguments():
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--gpu"], capture_output=True, text=True)
    assert res.returncode == 2 and "usage: tools/gpu_check.sh" in res.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 60 s on a core of its own
def test_gpu_pairs_writes_records_and_table_after_each_pair_and_stops_at_its_budget(tmp_path):
    """The gpu-pairs runner at its tiny size on the CPU: after each pair, that pair's records and a table over every pair
    so far are on disk; with every seed run it says so; with little time, the budget stops it by its rule."""
    from xsa_nb.gpu_pairs import run_gpu_pairs
    study = tmp_path / "all" / "gpu" / "pairs"
    seen = []

    def after_pair(line: str) -> None:  # the runner logs a pair's line once its files are written
        if not line.startswith("pair "):
            return
        seeds = list(range(len(seen) + 1))
        for seed in seeds:
            for arm in ("base", "xsa"):
                assert sorted(p.name for p in (study / "runs" / f"d1_{arm}_s{seed}").iterdir()) == \
                    ["metrics.jsonl", "summary.json"], (seed, arm)
        assert json.loads((study / "pairs.json").read_text())["pairs_run"] == len(seeds)
        verdicts = (study / "verdicts.md").read_text()
        assert f"seeds: {', '.join(map(str, seeds))}; arms: base, xsa" in verdicts, verdicts
        seen.append(line)

    ran = run_gpu_pairs(tmp_path / "all", 1e6, device="cpu", tiny=True, seeds=(0, 1, 2), log=after_pair)
    assert len(seen) == ran["pairs_run"] == 3 and ran["stopped"] == "every seed ran", (seen, ran)
    assert (study / "per_run.csv").read_text().count("d1_") == 6

    budget = 30.0
    ran = run_gpu_pairs(tmp_path / "some", budget, device="cpu", tiny=True, log=lambda s: None)
    pairs = ran["pairs"]
    assert ran["stopped"] == "the budget" and 1 <= len(pairs) < 64, ran
    assert all(p["started_s"] + before["seconds"] <= budget for before, p in zip(pairs, pairs[1:])), pairs
    assert ran["stop_s"] + pairs[-1]["seconds"] > budget, ran
    assert json.loads((tmp_path / "some" / "gpu" / "pairs" / "pairs.json").read_text()) == json.loads(json.dumps(ran))
