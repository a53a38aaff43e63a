"""The `plugins` stage: DVC re-runs training when an algorithm of your own changes, and only
then."""

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.common import merged, scratch_project
from pipelines.layout import Layout
from pipelines.stages.plugins import fingerprint, record_plugins

REPO = Path(__file__).resolve().parents[3]
TOY = REPO / "tests" / "rlcore" / "algos" / "plugins" / "toy_algorithm.py"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_plugin_is_recorded_by_the_files_of_its_package(tmp_path, monkeypatch):
    (tmp_path / "my_pkg" / "nets").mkdir(parents=True)
    files = {
        "my_pkg/__init__.py": "",
        "my_pkg/my_algo.py": "from my_pkg.nets import mlp\n",
        "my_pkg/nets/__init__.py": "mlp = None\n",  # a helper of the same package counts
        "solo.py": "lr = 1\n",
    }
    for path, text in files.items():
        (tmp_path / path).write_text(text)
    (tmp_path / "my_pkg" / "README.md").write_text("not source")
    monkeypatch.syspath_prepend(str(tmp_path))

    package = {path: sha256(text) for path, text in files.items() if path.startswith("my_pkg/")}
    data = {"algorithm": {"name": "my_pkg.my_algo:my_algo"}}
    assert fingerprint(data) == {"modules": {"my_pkg.my_algo": package}}
    assert fingerprint({"algorithm": {"name": "solo:solo"}}) == {
        "modules": {"solo": {"solo.py": sha256("lr = 1\n")}}
    }
    assert "my_pkg.my_algo" not in sys.modules  # found, never imported

    # Builtins, a missing section and a module nowhere to be found: train judges those.
    for builtin in ({}, {"algorithm": {"name": "sac"}}, {"algorithm": "ppo"}):
        assert fingerprint(builtin) == {"modules": {}}
    missing = {"algorithm": {"name": "no_such.pkg:x"}}
    assert fingerprint(missing) == {"modules": {"no_such.pkg": None}}

    layout = Layout(root=tmp_path)
    record_plugins(data, layout)
    written = layout.plugins.stat().st_mtime_ns
    record_plugins(data, layout)  # the same source: the file is left alone
    assert layout.plugins.stat().st_mtime_ns == written
    (tmp_path / "my_pkg" / "nets" / "__init__.py").write_text("mlp = 1\n")
    after = record_plugins(data, layout)
    assert after["modules"]["my_pkg.my_algo"]["my_pkg/nets/__init__.py"] == sha256("mlp = 1\n")
    assert json.loads(layout.plugins.read_text()) == after


def test_a_gymnasium_env_of_your_own_is_recorded_too(tmp_path, monkeypatch):
    """`env.name: "gymnasium:my_envs.arena:Arena-v0"`: the module that registers the env is
    code of your own, as an algorithm's is."""
    (tmp_path / "my_envs").mkdir()
    files = {"my_envs/__init__.py": "", "my_envs/arena.py": "SIZE = 3\n"}
    for path, text in files.items():
        (tmp_path / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    sources = {path: sha256(text) for path, text in files.items()}
    env = {"env": {"name": "gymnasium:my_envs.arena:Arena-v0"}}
    assert fingerprint(env) == {"modules": {"my_envs.arena": sources}}
    both = {**env, "algorithm": {"name": "solo:solo"}}
    assert list(fingerprint(both)["modules"]) == ["solo", "my_envs.arena"]
    for registered in ("gymnasium:CartPole-v1", "pendulum", "mujoco:Hopper"):
        assert fingerprint({"env": {"name": registered}}) == {"modules": {}}


def test_the_stage_imports_neither_the_plugin_nor_torch(tmp_path):
    """The toy module imports torch at its top; the stage finds its file without running it."""
    (tmp_path / "params.yaml").write_text("algorithm: {name: 'toy_algorithm:toy'}\n")
    code = (
        "import sys\nfrom pipelines.__main__ import main\nmain(['plugins'])\n"
        "print(sorted(m for m in ('torch', 'toy_algorithm', 'pydantic') if m in sys.modules))"
    )
    env = {"PYTHONPATH": f"{REPO}:{TOY.parent}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[plugins] toy_algorithm: 1 file(s) hashed, recorded in metrics/plugins.json",
        "[]",
    ]
    recorded = json.loads((tmp_path / "metrics" / "plugins.json").read_text())
    assert recorded == {"modules": {"toy_algorithm": {"toy_algorithm.py": sha256(TOY.read_text())}}}


def test_an_unreadable_params_file_is_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("algorithm: [\n")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "plugins"], cwd=tmp_path, capture_output=True,
        text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: plugins: params.yaml: line 2, column 1: malformed YAML (expected the node "
        "content, but found '<stream end>')"
    ]


TOY_RUN = {
    "name": "toy",
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 4},
    "policy": {"hidden_sizes": [8]},
    "algorithm": {"name": "toy_algorithm:toy", "toy": {"lr": 0.01}},
    "trainer": {"total_env_steps": 4 * 8 * 2, "num_steps": 8, "eval_episodes": 1},
}


def ran(output: str) -> list[str]:
    return re.findall(r"^Running stage '([^']+)'", output, re.MULTILINE)


def test_editing_a_plugin_reruns_training_through_dvc(tmp_path, git_dvc_env):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    shutil.copy(TOY, tmp_path / TOY.name)  # the project's own module, first on sys.path
    scratch_project(tmp_path, git_dvc_env, merged(defaults, TOY_RUN))

    def repro() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "dvc", "repro", "train"], cwd=tmp_path, env=git_dvc_env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert ran(repro()) == ["plugins", "train@0"]
    assert ran(repro()) == ["plugins"]  # the same source: train is up to date
    with (tmp_path / TOY.name).open("a") as module:
        module.write("# an edit\n")
    assert ran(repro()) == ["plugins", "train@0"]
