"""End-to-end properties of the training loop that need separate processes: a run killed mid-way resumes bit for
bit (in float32 and under bf16 autocast), a NaN stops the run and leaves a loadable checkpoint, a second writer of a
run directory is refused, and torchrun with 2 CPU processes matches one process.
The kill-and-resume and torchrun tests take most of a minute each: they are in the slow tier (`make test-slow`)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

TINY = dict(depth=2, seq_len=64, device_batch_size=4, total_batch_size=256, eval_every=-1, eval_tokens=256, warmup_steps=2, steps=8,
            save_every=1)


def losses(run_dir):
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m["loss"] for m in lines if "loss" in m]


CODE = "import sys, json; from xsa_nb.config import TrainConfig; from xsa_nb.trainer import train; train(TrainConfig(**json.loads(sys.argv[1])))"


def spawn_train(run_dir, env=None, **given):
    return subprocess.Popen([sys.executable, "-c", CODE, json.dumps(dict(TINY, run_dir=str(run_dir)) | given)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # the cpu preset's dtype and cpu-bf16's autocast
def test_kill_and_resume_is_bit_for_bit(tmp_path, dtype):
    whole = spawn_train(tmp_path / "whole", dtype=dtype)  # every run in a fresh process: no state shared with other tests
    assert whole.wait(timeout=300) == 0, whole.stderr.read()[-5000:]
    proc = spawn_train(tmp_path / "killed", dtype=dtype)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        path = tmp_path / "killed" / "metrics.jsonl"
        if path.exists() and len(losses(tmp_path / "killed")) >= 4:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = json.loads((tmp_path / "killed" / "checkpoint" / "meta.json").read_text())["step"]
    assert 0 < killed_at < TINY["steps"]
    resumed = spawn_train(tmp_path / "killed", dtype=dtype)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()[-5000:]
    assert losses(tmp_path / "killed") == losses(tmp_path / "whole")  # exact equality: bit for bit


def test_nan_stops_with_a_clear_message_and_a_loadable_checkpoint(tmp_path):
    from xsa_nb.checkpoint import load_checkpoint
    from xsa_nb.config import TrainConfig, build_model
    from xsa_nb.trainer import TrainingDiverged, train
    from xsa_nb.data import default_tokenizer
    cfg = TrainConfig(**TINY, run_dir=str(tmp_path / "nan"), nan_at_step=3)
    with pytest.raises(TrainingDiverged, match=r"training loss is nan at step 3 .*the last good checkpoint is "
                                               r".*nan/checkpoint \(step 3\)"):
        train(cfg, log=lambda *_: None)
    never_saved = TrainConfig(**TINY | dict(save_every=-1), run_dir=str(tmp_path / "nan2"), nan_at_step=3)
    with pytest.raises(TrainingDiverged, match="no checkpoint was saved before it"):
        train(never_saved, log=lambda *_: None)
    assert not (tmp_path / "nan2" / "checkpoint").exists()
    state = load_checkpoint(tmp_path / "nan" / "checkpoint", build_model(cfg, default_tokenizer().vocab_size, "cpu"))
    assert state["step"] == 3  # the weights after steps 0..2: the last good ones
    assert len(losses(tmp_path / "nan")) == 3


@pytest.mark.slow
def test_torchrun_two_processes_match_one(tmp_path):
    """Every row group holds the same documents, so each rank's batch equals the single process's batch and the
    averaged gradient equals the single-process gradient: the losses must agree to fp32 rounding. This checks the
    distributed plumbing (process group, identical init, gradient averaging and sharded orthogonalisation inside
    MuonAdamW, rank-0-only writes)."""
    from xsa_nb.data import default_data_dir, iter_documents, write_shard
    docs = [d for _, d in zip(range(64), iter_documents(default_data_dir(), "train"))]
    data = tmp_path / "data"
    # two training shards and a validation shard, every row group identical; 2 048 training documents, so that each
    # rank's share (1 024) exceeds the loader's buffer of 1 000, which is then the same on one process and on two
    for k, copies in enumerate((16, 16, 4)):
        write_shard(data / f"shard_{k:05d}.parquet", {"text": docs * copies}, row_group_size=len(docs))
    given = dict(TINY, steps=4, save_every=-1, data_dir=str(data))
    # two ranks step on 2 × 256 tokens (the same 256 twice); the recipe scales rates and decay by √(batch), so the
    # single process, stepping on 256, gets √2 × each at the reference batch: the optimizer then sees equal numbers
    single_params = dict(given, **{k: v * 2 ** 0.5 for k, v in dict(matrix_lr=0.02, embedding_lr=0.3, unembedding_lr=0.008,
                                                                   scalar_lr=0.5, weight_decay=0.28).items()})
    one_thread = dict(os.environ, OMP_NUM_THREADS="1")  # the same matmul reduction order in every process
    single = spawn_train(tmp_path / "one", env=one_thread, **single_params)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
                "--no-python", sys.executable, "-c", CODE,
                json.dumps(dict(given, total_batch_size=512, run_dir=str(tmp_path / "two")))]
    res = subprocess.run(torchrun, capture_output=True, text=True, env=one_thread, timeout=300)
    assert res.returncode == 0, res.stderr[-5000:]
    assert single.wait(timeout=300) == 0, single.stderr.read()[-5000:]
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(one) == len(two) == 4
    assert one[0] == two[0], (one, two)  # same init, same batch
    assert max(abs(a - b) / a for a, b in zip(one, two)) < 1e-5, (one, two)


def test_a_second_writer_of_a_run_directory_is_refused(tmp_path):
    """Two trainings into one run directory: while the first runs, the second is refused naming the first (before,
    both 'succeeded', metrics.jsonl held every step twice); once the first is killed its lock is stale and a third
    process resumes the run."""
    first = spawn_train(tmp_path / "run", steps=400, save_every=50)
    lock = tmp_path / "run" / ".lock"
    deadline = time.time() + 120
    while time.time() < deadline and first.poll() is None and not (lock.exists() and lock.read_text()):
        time.sleep(0.05)
    try:
        assert first.poll() is None, first.stderr.read()[-5000:]
        second = spawn_train(tmp_path / "run", steps=400, save_every=50)
        assert second.wait(timeout=120) != 0
        assert f"is being written by training (process {first.pid}" in second.stderr.read()
    finally:
        first.kill()
        first.wait()
    third = spawn_train(tmp_path / "run", steps=400, save_every=50)
    deadline = time.time() + 120
    while time.time() < deadline and third.poll() is None and f"process {third.pid} " not in lock.read_text():
        time.sleep(0.05)
    third.kill()
    third.wait()
    assert f"training (process {third.pid} " in lock.read_text()  # the killed first's lock was taken over


def test_a_run_followed_live_writes_its_wandb_files(tmp_path):
    """-p wandb_project NAME logs the metrics to Weights & Biases; offline, its files land in the run directory, and
    metrics.jsonl is written as always."""
    pytest.importorskip("wandb")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    proc = spawn_train(tmp_path / "run", env=env, steps=3, save_every=-1, wandb_project="xsa_nb-test")
    assert proc.wait(timeout=300) == 0, proc.stderr.read()[-5000:]
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, sorted(p.name for p in (tmp_path / "run").rglob("*"))
    assert len(losses(tmp_path / "run")) == 3
