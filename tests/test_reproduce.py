"""`xsa_nb reproduce --preset smoke`, run in a temporary copy of the notebooks, trains and evaluates every smoke run
through papermill and writes every table and figure of the report; the numbers in the tables are the ones in the
run directories (checked against eval.json, and by changing eval.json and writing the report again). The
reproduction takes minutes, so those tests are in the slow tier (`make test-slow`)."""
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.xdist_group("reproduce")  # one worker: the module fixture is built once
from xsa_nb.checkpoint import RECORD_FILES
from xsa_nb.experiments import get_preset, run_status
from xsa_nb.report import REPORT_FILES, write_report

XSA_NB = str(Path(sys.executable).parent / "xsa_nb")


def reproduce(root: Path, preset: str, *options: str, threads: int = 1) -> subprocess.CompletedProcess:
    "`xsa_nb reproduce --preset preset *options` in `root`, on `threads` threads in all (the same numbers anywhere)."
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"} | {"OMP_NUM_THREADS": str(threads)}
    return subprocess.run([XSA_NB, "reproduce", "--preset", preset, *options], cwd=root, env=env, capture_output=True,
                          text=True)


def fresh_root(root: Path) -> Path:
    "A repository root holding the notebooks and settings.ini only."
    shutil.copytree(ROOT / "nbs", root / "nbs", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "runs"))
    shutil.copy(ROOT / "settings.ini", root / "settings.ini")
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = fresh_root(tmp_path_factory.mktemp("repo"))
    res = reproduce(root, "smoke")
    assert res.returncode == 0, res.stderr[-5000:]
    return root


def rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_every_run_is_complete(repo):
    for run in get_preset("smoke").runs:
        d = repo / "runs" / "smoke" / run.name
        assert run_status(d) == "complete", run.name
        assert (d / "train.ipynb").is_file() and (d / "eval.ipynb").is_file()
    assert (repo / "runs" / "smoke" / "report.ipynb").is_file()


@pytest.mark.slow
def test_every_report_file_is_written(repo):
    out = repo / "docs" / "results" / "smoke"
    assert sorted(p.name for p in out.iterdir()) == sorted(REPORT_FILES + ("runs",))
    for run in get_preset("smoke").runs:  # every run's records are kept beside the tables, and nothing more
        assert sorted(p.name for p in (out / "runs" / run.name).iterdir()) == sorted(RECORD_FILES), run.name
    for name in REPORT_FILES:
        assert (out / name).stat().st_size > 0, name
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


@pytest.mark.slow
def test_table_numbers_come_from_run_directories(repo):
    out, runs = repo / "docs" / "results" / "smoke", repo / "runs" / "smoke"
    val = lambda name: json.loads((runs / name / "eval.json").read_text())["val_bpb"]
    ours = {(r["depth"], r["variant"]): r for r in rows(out / "xsa_muon.csv") if r["source"] == "ours (smoke)"}
    assert float(ours[("1", "baseline")]["val_bpb"]) == val("d1_base_s0")
    assert float(ours[("2", "XSA α=1")]["val_bpb"]) == val("d2_xsa_s0")
    routing = {r["residual"]: r for r in rows(out / "routing.csv") if r["source"] == "ours (smoke)"}
    assert float(routing["delta_block"]["val_bpb"]) == val("d1_delta_block_s0")
    conv = {r["converted_to"]: r for r in rows(out / "routing_conversion.csv")}
    logged = [json.loads(l) for l in (runs / "d1_conv_delta_block_s0" / "metrics.jsonl").read_text().splitlines()]
    first = next(m for m in logged if "val_bpb" in m)  # the converted weights, before any update
    assert first["step"] == json.loads((runs / "d1_base_s0" / "summary.json").read_text())["steps"]
    assert float(conv["delta_block"]["at_conversion"]) == first["val_bpb"]
    assert abs(float(conv["standard"]["jump"])) < 1e-9  # the control continues the very same weights
    chat = {r["variant"]: r for r in rows(out / "chatcore.csv") if r["source"] == "ours (smoke)"}
    scored = json.loads((runs / "d2_xsa_sft_s0" / "eval.json").read_text())["chatcore"]
    if scored["chatcore"] is None:  # HumanEval refused where this machine cannot isolate it (07b_chat_eval)
        assert chat["XSA α=1"]["chatcore"] == "not run" and scored["not_run"], (chat["XSA α=1"], scored)
    else:
        assert float(chat["XSA α=1"]["chatcore"]) == scored["chatcore"]

    edited = repo / "edited_runs"  # change one eval.json: the regenerated table follows it
    shutil.copytree(runs, edited)
    ev = json.loads((edited / "d2_xsa_s0" / "eval.json").read_text())
    (edited / "d2_xsa_s0" / "eval.json").write_text(json.dumps(ev | {"val_bpb": 9.8765}))
    write_report("smoke", edited, repo / "edited_out")
    assert "| 2 | XSA α=1 | 1 | 9.8765 |" in (repo / "edited_out" / "headline.md").read_text()


@pytest.mark.slow
def test_report_is_rebuilt_from_the_kept_records_alone(repo, tmp_path):
    """A clone holds the kept records and no run directory: `xsa_nb report --from-records` writes every table again,
    byte for byte, and without the records it is refused naming where they should be."""
    clone = tmp_path / "clone"
    shutil.copytree(repo, clone, ignore=shutil.ignore_patterns("runs", "*.png"), dirs_exist_ok=False)
    shutil.copytree(repo / "docs" / "results" / "smoke" / "runs", clone / "docs" / "results" / "smoke" / "runs")
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"}
    res = subprocess.run([XSA_NB, "report", "--preset", "smoke", "--from-records"], cwd=clone, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    out, committed = clone / "docs" / "results" / "smoke", repo / "docs" / "results" / "smoke"
    for name in REPORT_FILES:
        if name.endswith((".md", ".csv")):
            assert (out / name).read_text() == (committed / name).read_text(), name
        else:
            assert (out / name).is_file(), name
    shutil.rmtree(out / "runs")
    res = subprocess.run([XSA_NB, "report", "--preset", "smoke", "--from-records"], cwd=clone, env=env,
                         capture_output=True, text=True)
    assert res.returncode != 0 and "no records of preset 'smoke'" in res.stderr + res.stdout, res.stderr[-3000:]


@pytest.mark.slow
def test_two_jobs_at_once_write_the_same_report(repo, tmp_path):
    """`--jobs 2` runs two runs at a time, each its own process on one of the two threads, every run after the run it
    continues or fine-tunes: every run completes with its log, and every table is the sequential run's, byte for byte
    (the per-run table aside: it holds training times)."""
    root = fresh_root(tmp_path / "jobs")
    res = reproduce(root, "smoke", "--jobs", "2", threads=2)
    assert res.returncode == 0, res.stderr[-5000:]
    for run in get_preset("smoke").runs:
        d = root / "runs" / "smoke" / run.name
        assert run_status(d) == "complete" and (d / "run.log").stat().st_size > 0, run.name
    out, sequential = root / "docs" / "results" / "smoke", repo / "docs" / "results" / "smoke"
    for name in (n for n in REPORT_FILES if n.endswith(".csv") and n != "per_run.csv"):
        assert (out / name).read_text() == (sequential / name).read_text(), name


@pytest.mark.slow
def test_the_local_executor_writes_the_same_report(repo, tmp_path):
    """`--executor local` submits every run as a submitit job (the Slurm path, with local processes), each after the
    run it starts from, and the report last: every table is the sequential run's, byte for byte (per-run aside)."""
    root = fresh_root(tmp_path / "local")
    res = reproduce(root, "smoke", "--executor", "local")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert all(run_status(root / "runs" / "smoke" / r.name) == "complete" for r in get_preset("smoke").runs)
    out, sequential = root / "docs" / "results" / "smoke", repo / "docs" / "results" / "smoke"
    for name in (n for n in REPORT_FILES if n.endswith(".csv") and n != "per_run.csv"):
        assert (out / name).read_text() == (sequential / name).read_text(), name


def fail_run(root: Path, run: str) -> None:
    "Make `root`'s 10_train raise right after its parameters when it trains `run` (the other runs train as ever)."
    path = root / "nbs" / "10_train.ipynb"
    nb = json.loads(path.read_text())
    at = next(i for i, c in enumerate(nb["cells"]) if "parameters" in c["metadata"].get("tags", []))
    nb["cells"].insert(at + 1, {"cell_type": "code", "execution_count": None, "id": "failrun0", "metadata": {}, "outputs": [],
                                "source": [f"if str(run_dir).endswith({run!r}): raise RuntimeError('this run fails')"]})
    path.write_text(json.dumps(nb))


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["sequential", "local"])
def test_a_failed_run_is_one_line_naming_it(executor, tmp_path):
    """A run that fails is named in one line on stderr (exit status 1, no traceback there), with its job's log under
    `--executor local`; the run that starts from it is skipped and named, and a run beside it is still complete."""
    root = fresh_root(tmp_path / "failing")
    fail_run(root, "d1_base_s0")
    options = ("--executor", "local") if executor == "local" else ()
    res = reproduce(root, "smoke", *options, "--only", "d1_base_s0", "d1_conv_standard_s0", "d1_xsa_s0")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    line = res.stderr.splitlines()[-1]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    if executor == "local":
        assert len(res.stderr.splitlines()) == 1, res.stderr
        log = Path(line.split("(its log: ")[1].split(")")[0])
        assert log.parent.parent == root / "runs" / "smoke" / "jobs" and "this run fails" in log.read_text()
        failed = f"its log: {log}"
    else:  # the cell's error; the traceback was logged on stdout where it happened
        failed = line.split("d1_base_s0 failed (")[1].split(")")[0]
        assert failed.startswith("RuntimeError in cell ") and failed.endswith(": this run fails"), line
        assert "RuntimeError: this run fails" in res.stdout, res.stdout[-3000:]
    assert line == (f"xsa_nb reproduce: 2 of 3 runs of smoke did not finish: d1_base_s0 failed ({failed}); "
                    "d1_conv_standard_s0 skipped (d1_base_s0 did not finish)"), line
    assert run_status(root / "runs" / "smoke" / "d1_xsa_s0") == "complete"


@pytest.mark.parametrize("preset", ["cpu", "cpu-bf16"])
def test_committed_cpu_tables_are_rebuilt_from_committed_records(preset, tmp_path):
    """Every table of a committed CPU report, written again from the records committed beside it (no run directory,
    no training), is the committed table byte for byte; every run of the preset has its records there."""
    committed = ROOT / "docs" / "results" / preset
    cpu = get_preset(preset)
    assert sorted(p.name for p in (committed / "runs").iterdir()) == sorted(r.name for r in cpu.runs)
    files = write_report(cpu, committed / "runs", tmp_path)
    tables = [f.name for f in files if f.suffix in (".md", ".csv")]
    assert len(tables) >= 15, tables
    for name in tables:
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name


def test_unknown_preset_is_refused(tmp_path):
    res = reproduce(ROOT, "no-such-preset")
    said = res.stderr.splitlines()[-1] if res.stderr else ""  # argparse's refusal, before anything is run
    assert res.returncode == 2 and "invalid choice: 'no-such-preset'" in said and "smoke" in said, res.stderr
