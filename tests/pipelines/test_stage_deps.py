"""Each DVC stage depends on what it reads (issue P18): editing the search's schema, the
compare page, the Prefect flows or the command table leaves every trained seed up to date,
and every module that training imports is one of its dependencies."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.common import merged, scratch_project

REPO = Path(__file__).resolve().parents[2]
TINY_RUN = {
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 4},
    "policy": {"hidden_sizes": [8]},
    "trainer": {"total_env_steps": 4 * 8 * 2, "num_steps": 8, "eval_episodes": 1},
}
# Read by no stage of the default pipeline.
NOT_READ_BY_TRAINING = (
    "pipelines/__main__.py",
    "pipelines/search/space.py",
    "pipelines/compare/page.py",
    "pipelines/orchestration/flows.py",
)
# Imported by train but change none of its tracked outputs (dvc.yaml says why).
NOT_DEPS = {"pipelines.stages.progress", "pipelines.stages.lifeline", "pipelines.stages.run_name"}


def train_deps() -> list[str]:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    return stages["train"]["deps"]


def test_every_module_training_imports_is_a_dependency_and_the_search_none():
    probe = (
        "import sys\nfrom pipelines.stages.run import _stage\n_stage('train')\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('pipelines'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    imported = {m for m in out.stdout.split() if not m.endswith("__init__")}
    deps = train_deps()
    for module in sorted(imported - NOT_DEPS):
        path = module.replace(".", "/")
        if Path(REPO / path).is_dir():
            continue  # a package's __init__: its modules are listed one by one
        assert f"{path}.py" in deps, f"train imports {module}, not among its deps"
    for path in NOT_READ_BY_TRAINING:
        module = path.removesuffix(".py").replace("/", ".")
        assert module not in imported and path not in deps


def test_editing_what_training_never_reads_retrains_nothing_through_dvc(tmp_path, git_dvc_env):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    scratch_project(tmp_path, git_dvc_env, merged(defaults, TINY_RUN))

    def dvc(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "dvc", *args], cwd=tmp_path, env=git_dvc_env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "Running stage 'train@0'" in dvc("repro", "train")
    for path in NOT_READ_BY_TRAINING:
        with (tmp_path / path).open("a") as source:
            source.write("# an edit\n")
    assert "train@0" not in dvc("status", "train")
    with (tmp_path / "pipelines/stages/train.py").open("a") as source:
        source.write("# an edit\n")
    assert "train@0" in dvc("status", "train")  # the check sees an edit that matters
