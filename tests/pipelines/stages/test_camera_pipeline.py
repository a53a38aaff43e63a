"""A camera task through every stage: `dvc repro` (train, evaluate, video, report) and an
offline dataset collected from it, with the camera's frames kept uint8 on disk."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import pytest
import yaml

from benchmarks.common import merged, scratch_project

REPO = Path(__file__).resolve().parents[3]
PIXELS = {
    "name": "pixels",
    "seeds": [0],
    "env": {"name": "push_cube_pixels", "num_envs": 4, "options": {"image_size": 16}},
    "policy": {"hidden_sizes": [16], "image_features": 16, "critic_obs": ["privileged"]},
    "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 2}},
    "trainer": {
        "total_env_steps": 256,
        "num_steps": 16,
        "eval_every_iters": 2,
        "eval_episodes": 2,
        "stop_at_eval_success": None,
    },
    "evaluation": {"episodes": 4},
    "video": {"episodes": 2, "frame_size": 32, "max_steps": 10},
    "collect": {"env_steps": 256},
}


def run(args, cwd, env):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_camera_task_runs_through_every_stage(tmp_path, git_dvc_env):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    scratch_project(tmp_path, git_dvc_env, merged(defaults, PIXELS))
    shown = run([sys.executable, "-m", "pipelines", "params", "--show"], tmp_path, git_dvc_env)
    assert "critic_obs:\n  - privileged" in shown
    run([sys.executable, "-m", "dvc", "repro"], tmp_path, git_dvc_env)
    evaluation = json.loads((tmp_path / "metrics" / "seeds" / "0" / "eval.json").read_text())
    assert evaluation["episodes"] == 4 and "success_rate" in evaluation
    # Each of the 2 episodes is its 32x32 scene with the actor's camera beside it: 2 x 32 wide.
    frames = iio.imread(tmp_path / "outputs" / "video" / "episodes.mp4")
    assert frames.shape[1:] == (32 + 2 * 2, 2 * (2 * 32) + 3 * 2, 3)
    assert "push_cube_pixels" in (tmp_path / "reports" / "run" / "report.md").read_text()

    run([sys.executable, "-m", "pipelines", "collect"], tmp_path, git_dvc_env)
    dataset = tmp_path / "data" / "offline"
    meta = json.loads((dataset / "meta.json").read_text())
    assert meta["format_version"] == 2
    assert meta["obs"]["image"] == {"dtype": "uint8", "shape": [3, 16, 16]}
    frames = meta["transitions"] * 3 * 16 * 16  # one byte per pixel: stored as uint8
    assert (dataset / "transitions" / "obs.image.memmap").stat().st_size == frames
