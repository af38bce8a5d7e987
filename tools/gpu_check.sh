#!/usr/bin/env bash
# The one prepared check for a lent GPU machine (one H200 or H100 with PyTorch, no network, no papermill or nbdev).
# The package runs from this tree (PYTHONPATH); rustbpe, which the image lacks, is carried as a wheel in .whl/.
#
#   tools/gpu_check.sh --fetch-wheels   here, before the call: download that wheel into .whl/ (git-ignored)
#   tools/gpu_check.sh                  on the GPU machine, from the repository root (carry .whl): results in $OUT,
#                                       or docs/results/gpu when $OUT is not set
#   tools/gpu_check.sh --cpu            the rehearsal on a CPU, tiny sizes (tests/test_gpu_check.py runs it)
#
# To bring the results back as two files (the log and an archive without the checkpoint), from the repository root:
#   R=$OUT; env -u OUT bash tools/gpu_check.sh 2>&1 | tee $R/run.log
#   tar czf $R/gpu.tgz --exclude=checkpoint --exclude=.lock docs/results/gpu
#
# Stages, each under its own time limit and writing its files as soon as it ends (a stage that runs out of time loses
# only itself), with TORCH_LOGS=graph_breaks,recompiles kept per stage in <stage>.log. At most 490 s in all:
#   env   10 s  nvidia-smi, Python, torch, CUDA and Triton versions                               -> env.txt
#   a     80 s  attention kernels at the d24 study shape (16 heads of 64, T 2048, 16 rows): windowed (S) and full (L),
#               SDPA against FlexAttention, forward + backward time, differences from SDPA (output and gradients), the
#               top kernels; then one training step of a d4 SSSL model on each kernel (loss, gradient norm)
#                                                                                               -> attention.json
#               then XSA's projection compiled with each form of its dot product, multiply-sum against bmm (time,
#               kernels, difference), written after the rest so a stage out of time keeps the above  -> xsa_dot.json
#   b    290 s  run_gpu_bench: the study's d12 (768 x 12 heads), then d24 (1024 x 16), T 2048, SSSL, bf16, compiled:
#               baseline (FlexAttention in the windowed layers), XSA, Delta Block, baseline on SDPA alone; tokens/s,
#               MFU against the measured bf16 peak, peak memory, Muon's Newton-Schulz timings -> gpu_bench.md, .json
#               (written after each depth; a compile is started only while one as long as the longest so far,
#               scaled by depth, fits the budget: on the first H200, 2026-12-04, the d12 variants took 40-70 s each
#               and the old 240 s stage ended inside the fourth, with nothing written)
#   c    110 s  train() end to end on the embedded corpus: d6, 30 steps, bf16 autocast, torch.compile, SSSL windows at
#               T 2048 on FlexAttention, validation through the compiled model, checkpoint, summary  -> smoke/
# Not prepared yet: the gpu-smoke preset end to end (it reads ClimbMix, which the machine cannot download) and the
# gpu-pairs XSA study (its regime waits for the variance pilot of the claims issue).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=gpu
case "${1:-}" in
    --cpu) mode=cpu ;;
    --fetch-wheels)
        mkdir -p .whl
        exec python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d .whl "rustbpe==$(python3 -c 'import importlib.metadata as m; print(m.version("rustbpe"))' 2>/dev/null || echo 0.1.0)" ;;
    "") ;;
    *) echo "usage: tools/gpu_check.sh [--cpu | --fetch-wheels]" >&2; exit 2 ;;
esac
out="${OUT:-docs/results/gpu}"
mkdir -p "$out"
if [ "$mode" = gpu ] && compgen -G ".whl/*.whl" >/dev/null; then  # the wheels are built for the device's Python
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site \
        .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/gpu_check_site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 TORCH_LOGS=graph_breaks,recompiles MODE=$mode OUT_DIR=$out
failed=()

stage() {  # stage NAME SECONDS PYTHON-CODE: run the code under a time limit, its output kept in NAME.log
    local name=$1 limit=$2 code=$3 start=$SECONDS
    echo "== stage $name (limit ${limit} s)"
    timeout "$limit" python3 -c "$code" >"$out/$name.log" 2>&1
    local rc=$?
    echo "   rc=$rc in $((SECONDS - start)) s; log: $out/$name.log"
    [ $rc -eq 0 ] || { failed+=("$name"); tail -5 "$out/$name.log"; }
}

stage env 10 '
import os, platform, subprocess, torch
lines = [f"python {platform.python_version()}", f"torch {torch.__version__}", f"cuda {torch.version.cuda}",
         f"devices {[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}"]
try:
    import triton; lines.append(f"triton {triton.__version__}")
except ImportError:
    lines.append("triton: not installed")
try:
    lines.append(subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=5).stdout)
except (OSError, subprocess.SubprocessError):
    lines.append("nvidia-smi: not available")
open(os.path.join(os.environ["OUT_DIR"], "env.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines[:5]))
'

stage a 80 '
import json, os, torch
from xsa_nb.bench import ATTENTION_SHAPES, Shape, attention_check, xsa_dot_check
if os.environ["MODE"] == "gpu":
    result = attention_check("cuda", torch.bfloat16)
else:
    result = attention_check("cpu", torch.float32, {"S": (2, 96, 4, 2, 16, 24), "L": (2, 96, 4, 2, 16, -1)},
                             repeats=2, model_shape=Shape("tiny_sssl", 2, 256, 2, 128, "SSSL"))
json.dump(result, open(os.path.join(os.environ["OUT_DIR"], "attention.json"), "w"), indent=2)
forms = xsa_dot_check("cuda", torch.bfloat16) if os.environ["MODE"] == "gpu" else \
    xsa_dot_check("cpu", torch.float32, (2, 96, 4, 2, 16), repeats=2)
json.dump(forms, open(os.path.join(os.environ["OUT_DIR"], "xsa_dot.json"), "w"), indent=2)
'

stage b 290 '
import os
from xsa_nb.bench import run_gpu_bench
if os.environ["MODE"] == "gpu":
    run_gpu_bench(os.environ["OUT_DIR"], "cuda", variants=("baseline", "xsa", "delta_block", "sdpa"), time_budget_s=260)
else:
    run_gpu_bench(os.environ["OUT_DIR"], "cpu", depths=(2,), batches={2: 2}, seq_len=64, vocab=128,
                  variants=("baseline", "sdpa"), rounds=1, warmup=1)
'

stage c 110 '
import json, os, shutil
from xsa_nb.config import TrainConfig
from xsa_nb.trainer import train
run_dir = os.path.join(os.environ["OUT_DIR"], "smoke")
shutil.rmtree(run_dir, ignore_errors=True)
if os.environ["MODE"] == "gpu":  # every GPU default (bf16, compile, SSSL, FlexAttention, T 2048) on the embedded corpus
    cfg = TrainConfig(depth=6, steps=30, total_batch_size=65536, device_batch_size=16, eval_every=15,
                      eval_tokens=65536, save_every=15, core_every=-1, data_dir="", tokenizer_path="", run_dir=run_dir)
else:
    cfg = TrainConfig(depth=2, steps=3, seq_len=64, device_batch_size=2, total_batch_size=128, eval_every=-1,
                      eval_tokens=128, save_every=-1, warmup_steps=1, run_dir=run_dir)
summary = train(cfg, progress=False)
print(json.dumps({k: summary[k] for k in ("val_bpb", "train_time", "steps", "tokens")}))
'

echo "results in $out"
if [ ${#failed[@]} -gt 0 ]; then
    echo "stages that failed or ran out of time: ${failed[*]}" >&2
    exit 1
fi
