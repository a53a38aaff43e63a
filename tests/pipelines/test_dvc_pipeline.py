"""One real `dvc repro` of the pipeline, end to end, in a throwaway git repo (~30 s)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STAGES = ("train", "evaluate", "video", "report")
TINY = {
    "name": "tiny",
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"lr": 1e-3, "num_epochs": 2, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 512, "num_steps": 16, "eval_every_iters": 2, "eval_episodes": 2},
    "evaluation": {"episodes": 4},
    "video": {"episodes": 2, "frame_size": 32, "max_steps": 10},
    "search": {
        "study_name": "tiny",
        "space": {"algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "overrides": {"trainer.total_env_steps": 256},
        "n_trials": 3,
    },
}


def merged(base, changes):
    """`base` with `changes` applied key by key (DVC needs every section it tracks present)."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and value else value
    return out


def run(args, cwd, env):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("project")
    for item in ("pipelines", "rlcore"):
        shutil.copytree(REPO / item, root / item, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    (root / "search").mkdir()
    shutil.copy(REPO / "search" / "dvc.yaml", root / "search" / "dvc.yaml")
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump(merged(defaults, TINY)))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }
    env.pop("PYTHONPATH", None)
    run(["git", "init", "-q"], root, env)
    run([sys.executable, "-m", "dvc", "init", "-q"], root, env)
    run([sys.executable, "-m", "dvc", "config", "core.analytics", "false"], root, env)
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "tiny project"], root, env)
    return root, env


def dvc_repro(project):
    root, env = project
    return run([sys.executable, "-m", "dvc", "repro"], root, env)


def test_repro_runs_end_to_end_then_skips_then_reruns_what_a_param_change_touches(project):
    root, env = project
    first = dvc_repro(project)
    for stage in STAGES:
        assert f"Running stage '{stage}'" in first
    train = json.loads((root / "metrics" / "train.json").read_text())
    evaluation = json.loads((root / "metrics" / "eval.json").read_text())
    assert train["env_steps"] == 512 and evaluation["episodes"] == 4
    assert (root / "outputs" / "checkpoints" / "final.pt").is_file()
    assert (root / "outputs" / "video" / "episodes.mp4").stat().st_size > 0
    assert (root / "reports" / "run" / "report.md").read_text().startswith("# tiny")
    assert "metrics/curve.csv" in run(
        [sys.executable, "-m", "dvc", "plots", "show", "--json"], root, env
    )

    second = dvc_repro(project)
    assert "Running stage" not in second
    assert "Data and pipelines are up to date" in second

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["evaluation"]["episodes"] = 6  # evaluation only: train must not re-run
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    third = dvc_repro(project)
    assert "Running stage 'evaluate'" in third and "Running stage 'train'" not in third
    assert "Running stage 'video'" not in third

    params["algorithm"]["ppo"]["lr"] = 5e-4  # an algorithm parameter: train and what follows
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    fourth = dvc_repro(project)
    for stage in STAGES:
        assert f"Running stage '{stage}'" in fourth


def test_search_runs_only_when_asked_for_and_resumes(project):
    root, env = project
    dvc_repro(project)  # the default pipeline (no-op if the test above ran)
    assert not (root / "metrics" / "search.json").exists()  # `dvc repro` never searches
    out = run([sys.executable, "-m", "dvc", "repro", "search/dvc.yaml"], root, env)
    assert "Running stage 'search/dvc.yaml:search'" in out
    assert json.loads((root / "metrics" / "search.json").read_text())["trials"] == 3
    assert (root / "reports" / "search" / "best_params.yaml").is_file()
    # More trials: the persistent journal resumes the study, adding only the missing ones.
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["search"]["n_trials"] = 4
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    out = run([sys.executable, "-m", "dvc", "repro", "search/dvc.yaml"], root, env)
    assert "3 trials so far, target 4" in out
    assert json.loads((root / "metrics" / "search.json").read_text())["trials"] == 4
