"""`collect` -> offline-only SAC through a real `dvc repro`, in a throwaway git repo."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlcore.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[3]
PARAMS = {
    "name": "offline",
    "seeds": [0],
    "env": {"name": "pendulum", "num_envs": 4},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"name": "sac", "sac": {"lr": 1e-3}},
    # Offline only: 4 iterations of 4 x 8 = 32 env-step equivalents, 0.5 updates each.
    "trainer": {"total_env_steps": 128, "num_steps": 8, "eval_episodes": 2},
    "replay": {
        "batch_size": 32,
        "updates_per_step": 0.5,
        "offline": {"path": "data/offline", "fraction": 1.0},
    },
    "collect": {"policy": "random", "env_steps": 1000},
}
# The dataset is an output of `collect` and a dependency of `train`: DVC orders them, caches
# the dataset and re-trains only when it changes.
DVC_YAML = """
stages:
  collect:
    cmd: python -m pipelines collect
    deps: [pipelines, rlcore]
    params: [env, collect]
    outs: [data/offline]
  train:
    cmd: python -m pipelines train --seed 0
    deps: [pipelines, rlcore, data/offline]
    params: [env, policy, algorithm, trainer, replay]
    outs: [outputs/seeds/0/checkpoints]
"""


def run(args, cwd, env):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_collect_then_offline_sac_through_dvc_repro(tmp_path, git_dvc_env):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    for item in ("pipelines", "rlcore"):
        shutil.copytree(REPO / item, tmp_path / item, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    env = git_dvc_env
    run(["git", "init", "-q"], tmp_path, env)
    run([sys.executable, "-m", "dvc", "init", "-q"], tmp_path, env)
    out = run([sys.executable, "-m", "dvc", "repro"], tmp_path, env)
    assert "[collect] done" in out and "[train] done" in out

    meta = json.loads((tmp_path / "data/offline/meta.json").read_text())
    # 1,000 steps rounded up to whole collector calls of 4 envs x 64 steps.
    assert meta["transitions"] == 1024 and meta["source"]["env"] == "pendulum"
    metrics = json.loads((tmp_path / "metrics/seeds/0/train.json").read_text())
    assert metrics["env_steps"] == 0 and metrics["iterations"] == 4
    checkpoint = load_checkpoint(tmp_path / "outputs/seeds/0/checkpoints/final.pt")
    assert checkpoint["ranks"][0]["replay"]["updates"] == 4 * 16
    lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())
    train_deps = {dep["path"] for dep in lock["stages"]["train"]["deps"]}
    assert "data/offline" in train_deps  # versioned: a new dataset re-runs training
    assert "Stage 'collect' didn't change" in run(
        [sys.executable, "-m", "dvc", "repro"], tmp_path, env
    )
    # The SAC policy loads for evaluation like any other.
    run([sys.executable, "-m", "pipelines", "evaluate", "--seed", "0"], tmp_path, env)
    assert json.loads((tmp_path / "metrics/seeds/0/eval.json").read_text())["episodes"] == 64


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"env": {"name": "cartpole", "num_envs": 4}},
            "error: train: algorithm.name 'sac' needs a continuous (1-D Box) action space; this "
            "env's is Discrete(2): use ppo or grpo for it",
        ),
        (
            {},  # replay.offline.path names a dataset nobody collected
            "error: train: replay.offline.path: dataset data/offline does not exist (collect one "
            "with `dvc repro data/dvc.yaml` or `python -m pipelines collect`)",
        ),
    ],
)
def test_sac_misuse_is_one_line_before_any_training(tmp_path, changes, line):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**PARAMS, **changes}))
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "train"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1
    assert done.stderr.strip() == line
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "metrics").exists()


def test_collect_records_the_trained_policy_of_the_first_seed(tmp_path):
    from pipelines.layout import Layout
    from pipelines.params import parse_params
    from pipelines.stages.collect import collect
    from pipelines.stages.train import train

    params = parse_params(
        {
            "env": {"name": "pendulum", "num_envs": 4},
            "policy": {"hidden_sizes": [8]},
            "trainer": {"total_env_steps": 256, "num_steps": 32, "eval_episodes": 2},
            "collect": {"policy": "trained", "env_steps": 1000, "output": "data/ppo"},
        }
    )
    layout = Layout(tmp_path)
    train(params, layout)
    metrics = collect(params, layout)
    # 1,000 steps rounded up to whole collector calls of 4 envs x 64 steps: 4 calls, 1,024
    # steps, 256 per env: every env ends one 200-step Pendulum episode.
    assert metrics["transitions"] == 1024 and metrics["episodes"] == 4
    meta = json.loads((tmp_path / "data/ppo/meta.json").read_text())
    assert "final.pt (sampled actions)" in meta["source"]["policy"]
    assert json.loads((tmp_path / "metrics/collect.json").read_text()) == metrics
