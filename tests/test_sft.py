"""Chat fine-tuning and ChatCORE end to end on the CPU: `14_sft` under papermill fine-tunes a small base run on the
committed chat sample, `11_eval` scores it with ChatCORE into eval.json, and an interrupted SFT resumes to exactly
the weights of an uninterrupted one."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT

pytestmark = pytest.mark.xdist_group("sft")  # one worker: the module fixture is built once

BASE = dict(depth=2, seq_len=64, device_batch_size=4, total_batch_size=256, eval_every=-1, eval_tokens=256,
            warmup_steps=1, xsa_alpha=1.0, residual="delta_block", device="cpu")


def papermill(notebook, out, *params):
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"}  # a real run, not the notebook's test mode
    cmd = [sys.executable, "-m", "papermill", str(ROOT / "nbs" / notebook), str(out), *params]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    from xsa_nb.config import TrainConfig
    from xsa_nb.trainer import train
    run = tmp_path_factory.mktemp("runs") / "smoke"
    train(TrainConfig(steps=3, run_dir=str(run), **BASE), log=lambda *_: None, progress=False)
    return run


@pytest.mark.slow
def test_sft_then_chatcore_under_papermill(base_run):
    sft = base_run.parent / "smoke_sft"
    res = papermill("14_sft.ipynb", base_run.parent / "sft.ipynb", "-p", "init_from", str(base_run), "-p", "steps", "5")
    assert res.returncode == 0, res.stderr[-5000:]
    config = json.loads((sft / "config.json").read_text())
    assert (config["init_from"], config["steps"], config["xsa_alpha"], config["residual"]) == (str(base_run), 5, 1.0,
                                                                                               "delta_block")
    assert config["weight_decay"] == 0.0 and config["warmdown_ratio"] == 0.5 and config["final_lr_frac"] == 0.0
    losses = [json.loads(l) for l in (sft / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in losses if "loss" in m] == list(range(5))
    record = json.loads((sft / "sft.json").read_text())
    assert record["base_run"] == str(base_run) and record["train_conversations"] == 8 + 3 * 6 + 4 * 5
    for name in ("loss.png", "summary.json", "checkpoint/model.safetensors"):
        assert (sft / name).is_file(), name

    res = papermill("11_eval.ipynb", sft / "eval.ipynb", "-p", "run_dir", str(sft), "-p", "eval_tokens", "1024",
                    "-p", "chat_dir", str(ROOT / "tests" / "fixtures" / "chat_bundle"))
    assert res.returncode == 0, res.stderr[-5000:]
    chat = json.loads((sft / "eval.json").read_text())["chatcore"]
    assert [(r["task"], r["problems"]) for r in chat["tasks"]] == [
        ("ARC-Easy", 2), ("ARC-Challenge", 2), ("MMLU", 4), ("GSM8K", 2), ("HumanEval", 0 if chat["not_run"] else 2)]
    centred = [None if r["accuracy"] is None else (r["accuracy"] - r["random_baseline"]) / (1 - r["random_baseline"])
               for r in chat["tasks"]]
    assert chat["chatcore_cat"] == pytest.approx(sum(centred[:3]) / 3)
    if chat["not_run"]:  # no isolation on this machine: HumanEval (and so ChatCORE) not run, never scored 0
        assert list(chat["not_run"]) == ["HumanEval"] and centred[4] is None and chat["chatcore"] is None
    else:
        assert chat["chatcore"] == pytest.approx(sum(centred) / 5)


@pytest.mark.slow
def test_interrupted_sft_resumes_exactly(base_run, tmp_path):
    from xsa_nb.chat_data import chat_sample_dir, sft_loaders, sft_mixture
    from xsa_nb.data import default_tokenizer
    from xsa_nb.config import TrainConfig
    from xsa_nb.trainer import TrainingDiverged, train
    tok = default_tokenizer()
    mix = {s: sft_mixture(chat_sample_dir(), s) for s in ("train", "val")}
    loaders = lambda: sft_loaders(tok, mix["train"], mix["val"], 4, 64)  # noqa: E731
    cfg = TrainConfig(**{**BASE, "steps": 4, "warmup_steps": 0, "weight_decay": 0.0, "init_from": str(base_run),
                         "run_dir": str(tmp_path / "whole"), "save_every": -1})
    train(cfg, log=lambda *_: None, progress=False, loaders=loaders())
    cut = dataclasses.replace(cfg, run_dir=str(tmp_path / "cut"), save_every=2)
    with pytest.raises(TrainingDiverged):  # a checkpoint at step 2, then the run dies at step 3
        train(dataclasses.replace(cut, nan_at_step=3), log=lambda *_: None, progress=False, loaders=loaders())
    state = json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2 and state["loader"][0]["consumed"] > 0
    train(cut, log=lambda *_: None, progress=False, loaders=loaders())
    whole, resumed = (load_file(str(tmp_path / d / "checkpoint" / "model.safetensors")) for d in ("whole", "cut"))
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)
    steps = [json.loads(l)["step"] for l in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(l)]
    assert steps == [0, 1, 2, 3]
