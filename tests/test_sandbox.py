"""Code a model writes cannot touch the machine (issue #36): planted HumanEval "completions" run under bubblewrap
and are contained — no file appears outside the private /tmp, no connection reaches a listener on 127.0.0.1, no
subprocess starts, the parent's environment is invisible, an endless loop ends at its time limit, a memory hog and a
fork loop fail while the machine stays usable. Without isolation, HumanEval is refused unless the user opts in."""
import os
import platform
import sys
import socket
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT
from xsa_nb import chat_eval
from xsa_nb.chat_data import Conversations, chat_sample_dir
from xsa_nb.chat_eval import (UNSAFE_CODE_EVAL_ENV, CodeEvalRefused, chat_accuracy, humaneval_passes,
                              isolation_problem, run_sandboxed)


@pytest.fixture()
def isolated():
    "Skips where this machine cannot isolate (the reason in the skip message)."
    if (problem := isolation_problem()) is not None:
        pytest.skip(f"no isolation here: {problem}")


@pytest.fixture()
def humaneval():
    "The committed sample's HumanEval conversations by entry point."
    return {c["entry_point"]: c for c in Conversations(chat_sample_dir(), "humaneval/test")}


def test_write_outside_private_tmp_is_contained(isolated, tmp_path):
    name = f"xsa_nb_marker_{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory(dir=ROOT) as in_checkout:  # outside /tmp: visible, read-only, inside
        for target in (tmp_path / "marker", os.path.join(in_checkout, "marker"), os.path.expanduser("~/" + name)):
            ok, err = run_sandboxed(f"open({str(target)!r}, 'w').write('escaped')")
            assert not ok and ("Read-only file system" in err or "No such file" in err), err
            assert not os.path.exists(target)
    test = f"open('/tmp/{name}', 'w').write('x')\nassert open('/tmp/{name}').read() == 'x'"
    assert run_sandboxed(test) == (True, "")  # its private /tmp is writable ...
    assert not os.path.exists(f"/tmp/{name}")  # ... and is not this machine's


def test_raw_socket_reaches_no_listener(isolated):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(1.0)
        port = listener.getsockname()[1]
        for program in (f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))",
                        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"):
            ok, err = run_sandboxed(program)
            assert not ok and "Error" in err, err
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody connected


def test_subprocess_cannot_start(isolated, tmp_path):
    marker = tmp_path / "from_subprocess"
    for program in (f"import subprocess\nsubprocess.run(['sh', '-c', 'echo x > {marker}'])",
                    f"import os, sys\nsys.exit(os.system('echo x > {marker}') != 0)",
                    "import os\nos.posix_spawn('/bin/true', ['true'], {})"):
        ok, err = run_sandboxed(program)
        assert not ok, (program, err)
    assert not marker.exists()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="system-call numbers for x86-64/AArch64")
def test_raw_clone_system_call_is_refused(isolated):
    nr = {"x86_64": 56, "aarch64": 220}[platform.machine()]
    program = ("import ctypes, os, sys\nr = ctypes.CDLL(None, use_errno=True).syscall(%d, 17, 0, 0, 0, 0)\n"
               "if r == 0:\n    os._exit(0)\nsys.exit(f'clone returned {r}, errno {ctypes.get_errno()}')" % nr)
    ok, err = run_sandboxed(program)  # 17 = SIGCHLD: a plain fork through clone
    assert not ok and "clone returned -1, errno 1" in err, err


def test_parent_environment_is_invisible(isolated, monkeypatch):
    monkeypatch.setenv("XSA_NB_PARENT_SECRET", "s3cret-value")
    program = ("import os, sys\nseen = repr(dict(os.environ)) + open('/proc/1/environ').read()\n"
               "sys.exit(seen if 's3cret' in seen or 'XSA_NB' in seen else 0)")
    assert run_sandboxed(program) == (True, "")


def test_endless_loop_ends_at_its_time_limit(isolated):
    t0 = time.monotonic()
    assert run_sandboxed("while True:\n    pass", timeout=1) == (False, "timed out after 1 s")
    assert time.monotonic() - t0 < 5
    t0 = time.monotonic()  # a thread that keeps the program alive dies with it too
    ok, _ = run_sandboxed("import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()", 1)
    assert not ok and time.monotonic() - t0 < 5


def test_memory_hog_is_contained(isolated):
    ok, err = run_sandboxed("x = bytearray(4 << 30)")
    assert not ok and "MemoryError" in err, err
    ok, err = run_sandboxed("x = []\nwhile True:\n    x.append(bytearray(8 << 20))")
    assert not ok and "MemoryError" in err, err
    # the private /tmp is memory too: sized where bubblewrap can (--size), and each file at most 16 MiB
    program = "for i in range(64):\n    open(f'/tmp/f{i}', 'wb').write(b'x' * (15 << 20))"
    ok, err = run_sandboxed(program)
    if chat_eval._bwrap_has_size(chat_eval.shutil.which("bwrap")):
        assert not ok and "No space left on device" in err, err


def test_fork_loop_is_contained(isolated):
    t0 = time.monotonic()
    ok, err = run_sandboxed("import os\nwhile True:\n    os.fork()", timeout=2)
    assert not ok and "Operation not permitted" in err, err
    assert time.monotonic() - t0 < 5
    assert run_sandboxed("import sys\nsys.exit(0)") == (True, "")  # the machine (and the sandbox) still work


def test_correct_completion_passes_and_wrong_fails(isolated, humaneval):
    assert humaneval_passes(humaneval["add"], "```python\ndef add(a, b):\n    return a + b\n```")
    assert not humaneval_passes(humaneval["add"], "def add(a, b):\n    return a - b")
    assert humaneval_passes(humaneval["hypot"], "def hypot(a, b):\n    return math.sqrt(a * a + b * b)")


@pytest.fixture()
def no_bwrap(tmp_path, monkeypatch):
    "A machine without bubblewrap: PATH holds an empty folder, no opt-in; the cached answer reset around the test."
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(UNSAFE_CODE_EVAL_ENV, raising=False)
    isolation_problem.cache_clear()
    yield
    isolation_problem.cache_clear()


def test_without_isolation_humaneval_is_refused_before_generation(no_bwrap, humaneval):
    assert "bubblewrap" in isolation_problem()
    with pytest.raises(CodeEvalRefused, match=f"without isolation: .*bubblewrap.*set {UNSAFE_CODE_EVAL_ENV}=1"):
        run_sandboxed("pass")
    asked = []
    with pytest.raises(CodeEvalRefused):
        chat_accuracy("HumanEval", None, None, list(humaneval.values()), generate=asked.append, device="cpu")
    assert asked == []  # refused before any generation


def test_opt_in_runs_without_isolation(no_bwrap, monkeypatch, humaneval):
    monkeypatch.setenv(UNSAFE_CODE_EVAL_ENV, "1")
    assert chat_eval.code_eval_isolated() is False
    assert humaneval_passes(humaneval["add"], "def add(a, b):\n    return a + b")
    assert not humaneval_passes(humaneval["add"], "def add(a, b):\n    return a - b")
    monkeypatch.setenv(UNSAFE_CODE_EVAL_ENV, "yes")  # only the documented value opts in
    with pytest.raises(CodeEvalRefused):
        run_sandboxed("pass")


def test_a_python_under_tmp_is_mounted_back(isolated, monkeypatch):
    """A clone under /tmp runs its virtual environment's Python, which the private /tmp would hide: it is mounted back
    read-only (without that, the program cannot start and every isolated test here would fail or skip)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        env = Path(d) / "env"
        (env / "bin").mkdir(parents=True)
        (env / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
        monkeypatch.setattr(sys, "executable", str(env / "bin" / "python"))
        monkeypatch.setattr(sys, "prefix", str(env))
        assert os.path.realpath(env) in chat_eval.python_under_tmp()
        assert run_sandboxed("print(1)") == (True, "")
        monkeypatch.setattr(chat_eval, "python_under_tmp", lambda: [])
        ok, err = run_sandboxed("print(1)")
        assert not ok and err, err
