import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.orchestration.baseline import BaselineError, restore_baseline


def git(root, *args, env):
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


DVC = [sys.executable, "-m", "dvc"]


def writer_stage(name: str, path: str, text: str) -> str:
    """A dvc.yaml stage that writes `text` to its output `path`."""
    write = f"from pathlib import Path; Path('{path}').write_text('{text}')"
    return f'  {name}:\n    cmd: python -c "{write}"\n    outs: [{path}]\n'


def dvc_project(root, env, stages: str) -> None:
    """A git + DVC project whose dvc.yaml holds `stages`."""
    git(root, "init", "-q", env=env)
    subprocess.run([*DVC, "init", "-q"], cwd=root, env=env, check=True)
    (root / "dvc.yaml").write_text(f"stages:\n{stages}")


def test_baseline_restores_the_committed_experiment_after_an_exp_run(tmp_path, git_dvc_env):
    env = git_dvc_env
    git(tmp_path, "init", "-q", env=env)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, env=env, check=True)
    (tmp_path / "params.yaml").write_text("name: baseline\n")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "summary.json").write_text('{"eval_return_mean": 500}\n')
    (tmp_path / "code.py").write_text("print('mine')\n")
    git(tmp_path, "add", "-A", env=env)
    git(tmp_path, "commit", "-qm", "baseline", env=env)
    # What `dvc exp run -S ...` leaves behind, and a code change of the user's.
    (tmp_path / "params.yaml").write_text("name: variant\n")
    (tmp_path / "metrics" / "summary.json").write_text('{"eval_return_mean": 12}\n')
    (tmp_path / "metrics" / "seeds").mkdir()
    (tmp_path / "metrics" / "seeds" / "train.json").write_text("{}")
    (tmp_path / "code.py").write_text("print('edited')\n")
    git(tmp_path, "add", "params.yaml", env=env)  # staged too

    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        done = restore_baseline(tmp_path)

    assert done[0] == "restored params.yaml, metrics as committed in HEAD"
    assert (tmp_path / "params.yaml").read_text() == "name: baseline\n"
    assert (tmp_path / "metrics" / "summary.json").read_text() == '{"eval_return_mean": 500}\n'
    assert not (tmp_path / "metrics" / "seeds").exists()
    assert (tmp_path / "code.py").read_text() == "print('edited')\n"  # code is left alone
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True,
                            text=True, env=env).stdout  # fmt: skip
    assert status.strip() == "M code.py"


def test_baseline_outside_a_git_repository_is_one_clear_error(tmp_path):
    with pytest.raises(BaselineError, match="git rev-parse --verify HEAD` failed"):
        restore_baseline(tmp_path)


def test_baseline_restores_dvc_outputs_and_skips_pipelines_never_run(tmp_path, git_dvc_env):
    """A fresh clone has side pipelines (search, collect) with no lock: they are no error."""
    env, dvc = git_dvc_env, DVC
    dvc_project(tmp_path, env, writer_stage("make", "out.txt", "baseline"))
    (tmp_path / "side").mkdir()
    (tmp_path / "side" / "dvc.yaml").write_text(f"stages:\n{writer_stage('side', 'side.txt', 'x')}")
    subprocess.run([*dvc, "repro", "dvc.yaml"], cwd=tmp_path, env=env, check=True,
                   capture_output=True)  # fmt: skip
    git(tmp_path, "add", "-A", env=env)
    git(tmp_path, "commit", "-qm", "baseline", env=env)
    (tmp_path / "out.txt").unlink()
    (tmp_path / "out.txt").write_text("variant")  # what an experiment leaves behind

    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        done = restore_baseline(tmp_path)

    assert done[-1] == "checked out DVC outputs to the versions in dvc.lock"
    assert (tmp_path / "out.txt").read_text() == "baseline"
    assert not (tmp_path / "side" / "side.txt").exists()


def test_baseline_keeps_an_output_whose_committed_version_is_not_in_the_cache(
    tmp_path, git_dvc_env
):
    """A fresh clone without a DVC remote: the committed outputs were never in its cache, and
    the user's first `dvc repro` made their own. Checking those out would delete them."""
    env, dvc = git_dvc_env, DVC
    stages = writer_stage("make", "lost.txt", "committed") + writer_stage(
        "other", "back.txt", "cached"
    )
    dvc_project(tmp_path, env, stages)
    subprocess.run([*dvc, "repro"], cwd=tmp_path, env=env, check=True, capture_output=True)
    git(tmp_path, "add", "-A", env=env)
    git(tmp_path, "commit", "-qm", "baseline", env=env)
    # lost.txt's committed version leaves the cache (as if never there); the user's run
    # wrote other versions of both.
    cache = subprocess.run(
        [*dvc, "cache", "dir"], cwd=tmp_path, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    (entry,) = [p for p in Path(cache).rglob("*") if p.is_file() and p.read_text() == "committed"]
    entry.unlink()
    for name in ("lost.txt", "back.txt"):
        (tmp_path / name).unlink()
        (tmp_path / name).write_text("mine")

    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        done = restore_baseline(tmp_path)

    assert (tmp_path / "lost.txt").read_text() == "mine"  # kept, not deleted
    assert (tmp_path / "back.txt").read_text() == "cached"  # restored
    assert done[-2] == "checked out back.txt to the versions in dvc.lock"
    assert done[-1].startswith("kept lost.txt unchanged: their committed versions are not in")
