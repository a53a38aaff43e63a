"""The train stage as several torch.distributed processes (runtime.processes, torchrun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from pipelines.layout import Layout
from rlcore.checkpoint import load_checkpoint
from tests.pipelines.stages.distributed_stage_workers import stage_resume_worker
from tests.rlcore.distributed_workers import run_ranks

ROOT = Path(__file__).resolve().parents[3]
TWO_PROCESSES = {
    "name": "tiny-ddp",
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"num_epochs": 2, "num_minibatches": 2}},
    "trainer": {
        "total_env_steps": 2 * 8 * 16 * 4,  # 4 iterations of 2 processes x 8 envs x 16 steps
        "num_steps": 16,
        "eval_every_iters": 2,
        "eval_episodes": 2,
        "checkpoint_every_iters": 1,
    },
    "runtime": {"threads": 1, "processes": 2},
}


def run_stage(root: Path, params: dict) -> subprocess.CompletedProcess[str]:
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    args = [sys.executable, "-m", "pipelines", "train", "--seed", "0"]
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_runtime_processes_launches_the_stage_as_that_many_ranks(tmp_path):
    done = run_stage(tmp_path, TWO_PROCESSES)
    assert done.returncode == 0, done.stderr
    layout = Layout(tmp_path)
    metrics = json.loads(layout.train_metrics.read_text())
    assert metrics["processes"] == 2
    assert metrics["iterations"] == 4 and metrics["env_steps"] == 2 * 8 * 16 * 4
    # Rank 0 alone reports: one line per evaluation, and one summary.
    assert done.stdout.count("eval return") == 2 and done.stdout.count("[train] done") == 1
    assert len(load_checkpoint(layout.final_checkpoint)["ranks"]) == 2
    assert not layout.resume_checkpoint.exists()


def test_a_failing_rank_ends_the_stage_with_one_line_errors(tmp_path):
    # Two processes cannot share one named GPU (and this test machine may have none).
    done = run_stage(tmp_path, {**TWO_PROCESSES, "env": {"name": "cartpole", "device": "cuda:0"}})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "error: train: 2 of 2 processes failed" in done.stderr
    assert not Layout(tmp_path).train_metrics.exists()


def test_an_interrupted_two_process_stage_resumes_exactly(tmp_path):
    params = {**TWO_PROCESSES, "runtime": {"threads": 1}}
    zero, one = run_ranks(stage_resume_worker, tmp_path, params)
    assert zero["saved_progress"] and one["saved_progress"]
    assert zero["resumed"]["processes"] == 2
    assert zero["resumed"]["iterations"] == zero["straight"]["iterations"] == 4
    straight = load_checkpoint(Layout(tmp_path / "straight").final_checkpoint)
    resumed = load_checkpoint(Layout(tmp_path / "interrupted").final_checkpoint)
    for key, value in straight["policy"].items():
        assert torch.equal(resumed["policy"][key], value), key
    for mine, theirs in zip(straight["ranks"], resumed["ranks"], strict=True):
        for key, value in mine["env"].items():
            assert torch.equal(theirs["env"][key], value), key
