"""`python -m pipelines` under a Python without the project's packages (DVC runs a stage's
`python` from PATH: `.venv/bin/dvc repro` without the environment activated reaches another
one) says which package and what to do, in one line, instead of an import traceback."""

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import pipelines.__main__ as entry

ROOT = Path(__file__).resolve().parents[2]


def test_every_requirement_of_the_project_is_known_by_its_module():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    modules_of: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(canonicalize_name(dist), set()).add(module)
    for dependency in dependencies:
        name = canonicalize_name(Requirement(dependency).name)
        assert modules_of[name] & entry.REQUIRED_MODULES, (name, modules_of[name])


@pytest.mark.parametrize("line", [["train"], ["--params", "exp.yaml", "train"]])
def test_a_stage_run_by_a_python_without_a_requirement_says_what_to_do(tmp_path, line):
    """The message names the stage however the line is written (options first or after)."""
    shadow = tmp_path / "shadow" / "gymnasium"
    shadow.mkdir(parents=True)  # stands for a Python that lacks gymnasium
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'gymnasium'\", name='gymnasium')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", *line],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"error: train: {sys.executable} has no gymnasium, which this project needs; install "
        f"the project into it (`make setup`, or `{sys.executable} -m pip install -c "
        "constraints.txt -e .`)\n"
    )


def test_outside_a_virtual_environment_the_fix_is_to_activate_the_projects(monkeypatch):
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)
    message = entry.missing_requirement(ModuleNotFoundError(name="torch.nn"), "evaluate")
    assert message is not None and message.startswith(f"error: evaluate: {sys.executable} has no")
    assert message.endswith("activate that (`source .venv/bin/activate`, which `make setup` "
                            "creates) and run again")  # fmt: skip


def test_a_module_that_is_no_requirement_is_left_to_its_own_error():
    assert entry.missing_requirement(ModuleNotFoundError(name="mujoco_warp"), "train") is None


def test_the_stage_dispatched_is_known_however_the_line_is_written(tmp_path, capsys):
    """What decides a stage's prompt exit (and names it in messages): `--params F report`
    runs the report stage as `report --params F` does."""
    missing = tmp_path / "missing.yaml"
    assert entry.main(["--params", str(missing), "report"]) != 0
    assert entry.dispatched() == "report"
    assert str(missing) in capsys.readouterr().err
