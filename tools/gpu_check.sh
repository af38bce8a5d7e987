#!/usr/bin/env bash
# The one prepared check for a lent GPU machine (one H100 or H200 with PyTorch, no network, no papermill or nbdev).
# The package runs from this tree (PYTHONPATH); nothing is installed and nothing is fetched.
#
#   tools/gpu_check.sh          on the GPU machine, from the repository root
#   tools/gpu_check.sh --cpu    the rehearsal on a CPU: tiny sizes, time limits x4 (tests/test_gpu_check.py runs it)
#
# Every run writes into a fresh directory named for its date and device, <date>-<device>/. With $OUT set (the device
# machine's return folder) that directory is made in $TMPDIR/gpu_check and $OUT receives exactly two files, refreshed
# after every stage: <date>-<device>.tgz (the directory, without checkpoints) and <date>-<device>.log (this script's
# output); to keep it: tar xzf $OUT/<date>-<device>.tgz -C docs/results/gpu. Without $OUT the directory is made in
# docs/results/gpu and the log is its run.log.
#
# It first checks, in seconds, what the stages need (the package's imports, CUDA, the embedded corpus) and stops
# naming what is missing. Then the stages, in the order of their value, each under its own time limit (cut to what
# is left of $GPU_CHECK_BUDGET, 480 s by default) and writing its files as it ends, with
# TORCH_LOGS=graph_breaks,recompiles kept per stage in <stage>.log:
#   env        nvidia-smi, Python, torch, CUDA and Triton versions                                      -> env.txt
#   d24        one compiled training step (bf16, T 2048, SSSL) of the study's d24 (1024 wide, 16 heads) and of
#              nanochat's d24 shape (1536 wide, 12 heads) at the d24 preset's 16 rows per device: peak memory, step
#              time, MFU; then the rows each one's peak says should fit, tried once       -> d24_probe.md, .json
#   attention  the attention kernels at the d24 study shape, SDPA against FlexAttention (time, differences, kernels),
#              one training step of a d4 SSSL model on each                                     -> attention.json
#              then XSA's projection with each form of its dot product, multiply-sum against bmm    -> xsa_dot.json
#   pairs      the gpu-pairs study (nbs/13d_gpu_pairs.ipynb): XSA against the baseline at d6, bf16, compiled, SSSL at
#              T 2048 on FlexAttention, on the embedded corpus, paired seeds one after another in one process until
#              its time is spent (what is left minus the bench's BENCH_MIN s); its first pair is train() end to end.
#              Records (no checkpoints), table and pairs.json written after each pair           -> gpu/pairs/
#   bench      run_gpu_bench with the time that is left: the study's d12 (768 x 12 heads), baseline, XSA, Delta
#              Block, baseline on SDPA alone: tokens/s, MFU, peak memory                     -> gpu_bench.md, .json
# To keep the pairs: cp -r <date>-<device>/gpu/pairs docs/results/gpu/ (the studies floor reads them there).
# Not here: the gpu-smoke preset end to end.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=gpu
case "${1:-}" in
    --cpu) mode=cpu ;;
    "") ;;
    *) echo "usage: tools/gpu_check.sh [--cpu]" >&2; exit 2 ;;
esac
budget=${GPU_CHECK_BUDGET:-480}
slack=1
if [ "$mode" = cpu ]; then slack=4; budget=$((budget * slack)); fi  # the rehearsal checks code paths, on a shared CPU
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 TORCH_LOGS=graph_breaks,recompiles MODE=$mode
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as nanochat sets it: less fragmentation at the peak

device=cpu
if [ "$mode" = gpu ]; then
    device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    device=${device:-no-gpu}
fi
slug=$(echo "$device" | tr 'A-Z' 'a-z' | sed -E 's/^nvidia //; s/[^a-z0-9]+/-/g; s/^-+|-+$//g')
name="$(date -u +%Y-%m-%d-%H%M)-$slug"
if [ -n "${OUT:-}" ]; then root="${TMPDIR:-/tmp}/gpu_check"; else root=docs/results/gpu; fi
mkdir -p "$root"
base=$name; n=1
while ! mkdir "$root/$name" 2>/dev/null; do n=$((n + 1)); name="$base-$n"; done  # a fresh directory every run
dir="$root/$name"
export DIR=$dir
if [ -n "${OUT:-}" ]; then log="$OUT/$name.log"; else log="$dir/run.log"; fi
say() { echo "$*" | tee -a "$log"; }

bring_back() {  # $OUT gets the directory as one archive (no checkpoints), replaced whole
    [ -n "${OUT:-}" ] || return 0
    tar czf "$root/$name.tgz" --exclude=checkpoint -C "$root" "$name" && mv -f "$root/$name.tgz" "$OUT/$name.tgz"
}

say "== $name: results in $dir; budget ${budget} s"
python3 - >>"$log" 2>&1 <<'EOF'
import importlib, os, sys
from pathlib import Path
missing = []
for module in ("torch", "numpy", "pyarrow", "safetensors", "tiktoken", "xsa_nb.bench_gpu", "xsa_nb.gpu_pairs"):
    try:
        importlib.import_module(module)
    except ImportError as e:
        missing.append(f"import {module}: {e}")
corpus = Path("data/sotu")
for path in [corpus / "tokenizer.json", *[corpus / f"shard_{k:05d}.parquet" for k in range(5)]]:
    if not path.is_file():
        missing.append(f"file {path} (the embedded corpus: the pairs stage trains on it)")
if os.environ["MODE"] == "gpu":
    try:
        import torch, triton  # torch.compile's GPU kernels are Triton's
        if not torch.cuda.is_available():
            missing.append("a CUDA device (torch.cuda.is_available() is False)")
    except ImportError as e:
        missing.append(f"import triton: {e}")
if missing:
    sys.exit("missing, nothing was run:\n  " + "\n  ".join(missing))
print("ready: every import and input is there")
EOF
if [ $? -ne 0 ]; then
    tail -n 20 "$log" >&2
    bring_back
    exit 3
fi
failed=()

stage() {  # stage NAME SECONDS PYTHON-CODE: run the code under min(SECONDS, what is left), its output in NAME.log
    local stage_name=$1 cap=$(($2 * slack)) code=$3 start=$SECONDS
    local limit=$(( budget - SECONDS < cap ? budget - SECONDS : cap ))
    if [ "$limit" -lt 10 ]; then
        say "== stage $stage_name: skipped, ${limit} s left of the budget"
        failed+=("$stage_name"); return
    fi
    say "== stage $stage_name (limit ${limit} s)"
    LIMIT=$limit timeout "$limit" python3 -c "$code" >"$dir/$stage_name.log" 2>&1
    local rc=$?
    say "   rc=$rc in $((SECONDS - start)) s; log: $stage_name.log"
    [ $rc -eq 0 ] || { failed+=("$stage_name"); tail -5 "$dir/$stage_name.log" | tee -a "$log"; }
    rm -rf "$dir"/*/checkpoint
    bring_back
}

stage env 20 '
import os, platform, subprocess, torch
alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
lines = [f"python {platform.python_version()}", f"torch {torch.__version__}", f"cuda {torch.version.cuda}",
         f"devices {[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}",
         f"PYTORCH_CUDA_ALLOC_CONF={alloc}"]
try:
    import triton; lines.append(f"triton {triton.__version__}")
except ImportError:
    lines.append("triton: not installed")
try:
    lines.append(subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=5).stdout)
except (OSError, subprocess.SubprocessError):
    lines.append("nvidia-smi: not available")
open(os.path.join(os.environ["DIR"], "env.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines[:6]))
'

stage d24 220 '
import os
from xsa_nb.bench import Shape
from xsa_nb.bench_gpu import run_d24_probe
budget = int(os.environ["LIMIT"]) - 15  # the probe stops starting compiles in time to write its page
if os.environ["MODE"] == "gpu":
    run_d24_probe(os.environ["DIR"], "cuda", time_budget_s=budget)
else:
    tiny = (Shape("study_d24", 2, 64, 2, 128, "SSSL", 64, 2), Shape("nanochat_d24", 2, 64, 2, 128, "SSSL"))
    run_d24_probe(os.environ["DIR"], "cpu", tiny, rounds=1, time_budget_s=budget, memory_bytes=64 * 2**20)
'

stage attention 80 '
import json, os, torch
from xsa_nb.bench import Shape
from xsa_nb.bench_gpu import attention_check, xsa_dot_check
if os.environ["MODE"] == "gpu":
    result = attention_check("cuda", torch.bfloat16)
else:
    result = attention_check("cpu", torch.float32, {"S": (2, 96, 4, 2, 16, 24), "L": (2, 96, 4, 2, 16, -1)},
                             repeats=2, model_shape=Shape("tiny_sssl", 2, 256, 2, 128, "SSSL"))
json.dump(result, open(os.path.join(os.environ["DIR"], "attention.json"), "w"), indent=2)
forms = xsa_dot_check("cuda", torch.bfloat16) if os.environ["MODE"] == "gpu" else \
    xsa_dot_check("cpu", torch.float32, (2, 96, 4, 2, 16), repeats=2)
json.dump(forms, open(os.path.join(os.environ["DIR"], "xsa_dot.json"), "w"), indent=2)
'

BENCH_MIN=90  # the least time the d12 bench is left: the ceilings, then one variant compiled (about 40-70 s) and timed
stage pairs $(( (budget - SECONDS) / slack - BENCH_MIN )) '
import os
from xsa_nb.gpu_pairs import run_gpu_pairs
budget = int(os.environ["LIMIT"]) - 25  # Python and torch start inside the limit, and the last table is written in it
if os.environ["MODE"] == "gpu":
    run_gpu_pairs(os.environ["DIR"], budget, arms=("base", "xsa"))
else:  # a few tiny pairs: the rehearsal checks the records, the table and the stop, not the numbers
    run_gpu_pairs(os.environ["DIR"], min(budget, 30), device="cpu", tiny=True)
'

stage bench 200 '
import os
from xsa_nb.bench import run_gpu_bench
budget = int(os.environ["LIMIT"]) - 15
if os.environ["MODE"] == "gpu":
    run_gpu_bench(os.environ["DIR"], "cuda", depths=(12,), variants=("baseline", "xsa", "delta_block", "sdpa"),
                  time_budget_s=budget)
else:
    run_gpu_bench(os.environ["DIR"], "cpu", depths=(2,), batches={2: 2}, seq_len=64, vocab=128,
                  variants=("baseline", "sdpa"), rounds=1, warmup=1, time_budget_s=budget)
'

say "== done in $SECONDS s: $dir${OUT:+ (brought back as $OUT/$name.tgz and $name.log)}"
if [ ${#failed[@]} -gt 0 ]; then
    say "stages that failed, ran out of time or were skipped: ${failed[*]}"
    bring_back
    exit 1
fi
bring_back
