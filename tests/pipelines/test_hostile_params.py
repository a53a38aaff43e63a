"""No value of params.yaml reaches a shell: DVC runs every stage's `cmd` through one, so the
commands carry nothing from params, and a seeded stage reads its seed from DVC's stage name.
Real `dvc repro` and `dvc exp run -S` in a throwaway git repo, with payloads that would
create a marker file if anything ran them."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.common import scratch_project

REPO = Path(__file__).resolve().parents[2]
DVC_FILES = [REPO / "dvc.yaml", REPO / "search" / "dvc.yaml", REPO / "data" / "dvc.yaml"]


def commands(dvcfile: Path) -> dict[str, str]:
    stages = yaml.safe_load(dvcfile.read_text())["stages"]
    return {name: stage["cmd"] for name, stage in stages.items()}


@pytest.mark.parametrize("dvcfile", DVC_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_stage_command_interpolates_anything(dvcfile):
    for name, cmd in commands(dvcfile).items():
        assert "${" not in cmd, f"{dvcfile.name}: stage {name} pastes a value into {cmd!r}"
        assert re.fullmatch(r"python -m pipelines [a-z]+", cmd), cmd


def payloads(marker: Path) -> list[str]:
    return [
        f"0; touch {marker}; true",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"0 && touch {marker}",
        f"0' ; touch {marker} ; '",
        f'0" ; touch {marker} ; "',
        f"0\ntouch {marker}",
    ]


@pytest.fixture(scope="module")
def project(tmp_path_factory, git_dvc_env):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("hostile")
    scratch_project(root, git_dvc_env, yaml.safe_load((REPO / "params.yaml").read_text()))
    # DVC runs `plugins` (always changed) before train on every repro: its file and lock
    # entry exist from here on, rewritten by no later run (the source stays the same).
    subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "plugins"], cwd=root, env=git_dvc_env,
        check=True, capture_output=True,
    )  # fmt: skip
    return root, git_dvc_env


def tree(root: Path) -> dict[str, bytes]:
    """Every file of the project but git's and DVC's own state."""
    skip = (root / ".git", root / ".dvc" / "tmp")
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file()
        and not any(p.is_relative_to(s) for s in skip)
        and "__pycache__" not in p.parts
    }


def our_errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


def test_shell_metacharacters_in_seeds_never_run(project, tmp_path):
    root, env = project
    params = root / "params.yaml"
    original = params.read_text()
    before = tree(root)
    marker = tmp_path / "pwned"
    for seed in payloads(marker):
        data = yaml.safe_load(original)
        data["seeds"] = [seed]
        params.write_text(yaml.safe_dump(data))
        done = subprocess.run(
            [sys.executable, "-m", "dvc", "repro", "train"], cwd=root, env=env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode != 0, output
        assert not marker.exists(), f"seed {seed!r} ran a command"
        assert "Traceback" not in output
        assert our_errors(output) == [
            "error: params.yaml: seeds.0: Input should be a valid integer, unable to parse "
            "string as an integer"
        ], output
        params.write_text(original)
        assert tree(root) == before  # nothing else was written or removed


def test_dvc_exp_run_set_param_payloads_never_run(project, tmp_path):
    root, env = project
    marker = tmp_path / "pwned"
    done = subprocess.run(
        [sys.executable, "-m", "dvc", "exp", "run", "-S", f"seeds=['0; touch {marker}; true']",
         "train"], cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0 and not marker.exists(), output
    assert "Traceback" not in output and len(our_errors(output)) == 1, output
    # `-S` writes the value into params.yaml before DVC runs anything (DVC's way): put back.
    subprocess.run(["git", "checkout", "params.yaml"], cwd=root, env=env, check=True)


def test_a_seeded_stage_takes_its_seed_from_the_dvc_stage_name(project, monkeypatch):
    from pipelines.stages.run import dvc_stage_seed

    monkeypatch.setenv("DVC_STAGE", "train@3")
    assert dvc_stage_seed("train") == 3 and dvc_stage_seed("evaluate") is None
    monkeypatch.setenv("DVC_STAGE", "sub/dvc.yaml:evaluate@-2")
    assert dvc_stage_seed("evaluate") == -2
    monkeypatch.delenv("DVC_STAGE")
    assert dvc_stage_seed("train") is None
    # Under DVC, a seed the stage name gives that params.yaml does not list is refused.
    root, env = project
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "train"], cwd=root, capture_output=True,
        text=True, timeout=120, env={**env, "DVC_STAGE": "train@7"},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: train: --seed 7 is not one of params.yaml's seeds [0, 1, 2]"
    ]
