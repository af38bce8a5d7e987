"""The prepared device script, rehearsed on the CPU: every stage runs its CPU path with tiny sizes and writes its
files (what cannot run without a GPU — bf16 autocast, compilation, FlexAttention's backward, the study's shapes —
is what the real call measures)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_the_device_script_runs_its_cpu_rehearsal(tmp_path):
    python_dir = str(Path(sys.executable).parent)  # the script calls `python3`: this environment's, as on the device
    env = dict(os.environ, OUT=str(tmp_path), OMP_NUM_THREADS="1", PATH=f"{python_dir}:{os.environ['PATH']}")
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--cpu"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for name in ("env.txt", "attention.json", "xsa_dot.json", "gpu_bench.md", "gpu_bench.json", "smoke/summary.json"):
        assert (tmp_path / name).is_file(), name
    attention = json.loads((tmp_path / "attention.json").read_text())
    assert {r["backend"] for r in attention["rows"]} == {"sdpa", "flex"}
    assert all(r["out_diff"] < 1e-4 for r in attention["rows"])
    forms = json.loads((tmp_path / "xsa_dot.json").read_text())
    assert [r["form"] for r in forms] == ["multiply-sum", "bmm"] and forms[0]["max_diff"] < 1e-4


def test_the_device_script_refuses_unknown_arguments():
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--gpu"], capture_output=True, text=True)
    assert res.returncode == 2 and "usage: tools/gpu_check.sh" in res.stderr
