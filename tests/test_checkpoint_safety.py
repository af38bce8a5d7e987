"""A run directory is data, not code: a checkpoint holding a pickle that would run code when loaded is refused by
every way in — resuming, `xsa_nb eval` and `init_from` — and the planted code never runs (issue #23)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT

TINY = dict(depth=1, seq_len=32, device_batch_size=2, total_batch_size=64, steps=2, eval_every=-1, eval_tokens=64,
            warmup_steps=1, save_every=-1, device="cpu")


class Planted:
    "Unpickling this writes the file named by the environment variable PLANTED_MARKER."
    def __reduce__(self):
        return Path.write_text, (Path(os.environ["PLANTED_MARKER"]), "the pickle ran")


@pytest.fixture()
def planted(tmp_path, monkeypatch):
    "A trained run directory whose checkpoint was replaced by the old pickled format with a planted object."
    from xsa_nb.config import TrainConfig
    from xsa_nb.trainer import train
    run = tmp_path / "run"
    train(TrainConfig(**TINY, run_dir=str(run)), log=lambda *_: None, progress=False)
    marker = tmp_path / "marker"
    monkeypatch.setenv("PLANTED_MARKER", str(marker))
    ck = run / "checkpoint"
    for name in ("optimizer.safetensors", "state.json"):
        (ck / name).unlink()
    torch.save({"state": {}, "param_groups": []}, ck / "optimizer.pt")
    torch.save({"step": 2, "loader": [{}], "rng": Planted()}, ck / "state.pt")
    return run, marker


def test_resume_refuses_a_pickled_checkpoint(planted):
    from xsa_nb.config import TrainConfig
    from xsa_nb.trainer import train
    run, marker = planted
    (run / "summary.json").unlink()  # unfinished: train() must read the checkpoint to resume
    with pytest.raises(ValueError, match=r"xsa_nb checkpoint convert .* --trust"):
        train(TrainConfig(**TINY, run_dir=str(run)), log=lambda *_: None, progress=False)
    assert not marker.exists()


def test_init_from_refuses_a_pickled_checkpoint(planted, tmp_path):
    from xsa_nb.config import TrainConfig
    from xsa_nb.trainer import train
    run, marker = planted
    with pytest.raises(ValueError, match=r"holds optimizer.pt, state.pt: pickles"):
        train(TrainConfig(**TINY, init_from=str(run), run_dir=str(tmp_path / "next")), log=lambda *_: None,
              progress=False)
    assert not marker.exists()


def test_eval_refuses_a_pickled_checkpoint(planted):
    run, marker = planted
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"}
    res = subprocess.run([str(Path(sys.executable).parent / "xsa_nb"), "eval", str(run), "-p", "eval_tokens", "64"],
                         capture_output=True, text=True, cwd=ROOT, env=env)
    assert res.returncode != 0
    assert "pickles, which can run code when loaded" in res.stdout + res.stderr
    assert not marker.exists()
    assert not (run / "eval.json").exists()


def test_convert_command_needs_trust_and_rejects_the_planted_object(planted):
    run, marker = planted
    xsa_nb = str(Path(sys.executable).parent / "xsa_nb")
    refused = subprocess.run([xsa_nb, "checkpoint", "convert", str(run)], capture_output=True, text=True)
    assert refused.returncode == 2 and "pass --trust" in refused.stderr, refused.stderr
    trusted = subprocess.run([xsa_nb, "checkpoint", "convert", str(run), "--trust"], capture_output=True, text=True)
    assert trusted.returncode != 0 and "Weights only load failed" in trusted.stderr, trusted.stderr[-2000:]
    assert not marker.exists()
    assert (run / "checkpoint" / "state.pt").exists()  # nothing was rewritten
