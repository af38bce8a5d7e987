"""The prepared device script, rehearsed on the CPU: every stage runs its CPU path with tiny sizes and writes its
files (what cannot run without a GPU — bf16 autocast, compilation, FlexAttention's backward, the study's shapes —
is what the real call measures)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


# The device image has PyTorch and the scientific stack but none of the notebook tools: the rehearsal hides them.
ABSENT_ON_DEVICE = ("nbdev", "fastcore", "execnb", "papermill", "nbformat", "nbclient", "jupyter_client", "ipykernel",
                    "IPython", "jupytext", "submitit", "wandb")
HIDE_MODULES = f"""import sys
class HideAbsent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {ABSENT_ON_DEVICE!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the device image)")
sys.meta_path.insert(0, HideAbsent())
"""


def test_the_device_script_runs_its_cpu_rehearsal(tmp_path):
    python_dir = str(Path(sys.executable).parent)  # the script calls `python3`: this environment's, as on the device
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE_MODULES)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), OMP_NUM_THREADS="1", PATH=f"{python_dir}:{os.environ['PATH']}",
               PYTHONPATH=str(site))
    hidden = subprocess.run(["python3", "-c", "import nbdev"], capture_output=True, text=True, env=env)
    assert hidden.returncode != 0 and "absent on the device image" in hidden.stderr  # the hiding works
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--cpu"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for name in ("env.txt", "attention.json", "xsa_dot.json", "gpu_bench.md", "gpu_bench.json", "smoke/summary.json"):
        assert (out / name).is_file(), name
    attention = json.loads((out / "attention.json").read_text())
    assert {r["backend"] for r in attention["rows"]} == {"sdpa", "flex"}
    assert all(r["out_diff"] < 1e-4 for r in attention["rows"])
    forms = json.loads((out / "xsa_dot.json").read_text())
    assert [r["form"] for r in forms] == ["multiply-sum", "bmm"] and forms[0]["max_diff"] < 1e-4


def test_the_device_script_refuses_unknown_arguments():
    res = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), "--gpu"], capture_output=True, text=True)
    assert res.returncode == 2 and "usage: tools/gpu_check.sh" in res.stderr
