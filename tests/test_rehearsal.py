"""Every run of the GPU presets rehearsed on the CPU (`09b_runner`: `rehearse`): one run per code path, with the run's
own settings but for the device, width, steps and data; what a CPU cannot rehearse is listed in 09b_runner and left to
`tools/gpu_check.sh`."""
import json

import pytest

from conftest import ROOT


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 5 minutes on a core of its own; more on a loaded machine
def test_every_gpu_run_is_rehearsed_on_the_cpu(tmp_path):
    from xsa_nb.runner import rehearsal_runs, rehearse
    from xsa_nb.model import MODEL_SWITCHES
    runs = rehearse(ROOT, tmp_path)
    assert {r.name for r in runs} == set(rehearsal_runs()[1].values())  # a stand-in for every run of the presets
    for run in runs:
        summary = json.loads((tmp_path / run.name / "summary.json").read_text())
        settings, config = summary["settings"], json.loads((tmp_path / run.name / "config.json").read_text())
        continued = run.kind == "train" and bool(run.after)  # counts its base run's two steps too
        assert summary["steps"] == (4 if continued else 2) and 0 < summary["val_bpb"] < 20, run.name
        assert (settings["device"], settings["dtype"], settings["window_pattern"]) == ("cpu", "bfloat16", "SSSL")
        if run.kind == "sft":  # fine-tuned from its base run, on the committed chat sample
            assert config["init_from"] == str(tmp_path / run.after)
            assert (tmp_path / run.name / "sft.json").is_file()
        else:  # every switch the run sets reached it, on the run's T with nanochat's packing, two micro-steps a step
            assert {k: settings[k] for k in MODEL_SWITCHES if k in run.params} == \
                {k: v for k, v in run.params.items() if k in MODEL_SWITCHES}, run.name
            assert settings["seq_len"] == run.params["seq_len"] and settings["packing"] == "bestfit"
            assert summary["recipe"]["grad_accum_steps"] == 2
            assert config["continue_from"] == (str(tmp_path / run.after) if run.after else "")
            assert settings["compile"] == run.params["compile"]
    evaluated = {r.name for r in runs if (tmp_path / r.name / "eval.json").is_file()}
    kinds = {(r.kind, r.params.get("residual", "standard") != "standard") for r in runs if r.name in evaluated}
    assert kinds == {("train", False), ("train", True), ("sft", False)}, evaluated
    routed = next(r for r in runs if r.name in evaluated and r.params.get("residual", "standard") != "standard")
    assert json.loads((tmp_path / routed.name / "eval.json").read_text())["routing"]["points"]
