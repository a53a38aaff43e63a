"""`collect.output` replaces only a dataset collect wrote, inside the repository unless told
otherwise; refusals are one line before any rollout; a full disk leaves the old dataset."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import pipelines.stages.collect
from pipelines.files import OutputError
from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.collect import collect
from rlcore.datasets import load_dataset

REPO = Path(__file__).resolve().parents[3]


def params_for(output: str, env_steps: int = 256, **collect_changes):
    return parse_params(
        {
            "env": {"name": "pendulum", "num_envs": 4},
            "collect": {"policy": "random", "env_steps": env_steps, "output": output}
            | collect_changes,
        }
    )


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def repo(tmp_path):
    """A repository root with a source package, a file and a directory outside it."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "__init__.py").write_text("code = 1\n")
    (root / "notes.txt").write_text("notes\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.txt").write_text("keep\n")
    (root / "link").symlink_to(tmp_path / "outside")
    return root


@pytest.mark.parametrize(
    ("output", "allow", "message"),
    [
        ("src", False, r"src is a directory that is not a dataset \(it holds __init__\.py\)"),
        (".", False, r"\. is the repository itself"),
        ("notes.txt", False, r"notes\.txt is a regular file, not a dataset directory"),
        ("../outside", False, r"\.\./outside resolves to .*/outside, outside the repository"),
        ("link/data", False, r"link/data resolves to .*/outside/data, outside the repository"),
        ("{outside}", False, r"resolves to .*/outside, outside the repository .*allow_outside"),
        ("/dev/null", False, r"/dev/null resolves to /dev/null, outside the repository"),
        ("/dev/null", True, r"/dev/null is a special file, not a dataset directory"),
        ("../outside", True, r"outside is a directory that is not a dataset \(it holds keep"),
    ],
)
def test_an_output_that_is_not_ours_is_refused_before_any_rollout(
    repo, monkeypatch, output, allow, message
):
    def no_env(*args, **kwargs):
        raise AssertionError("the env was built before the output was checked")

    monkeypatch.setattr(pipelines.stages.collect, "make_env", no_env)
    output = output.format(outside=repo.parent / "outside")
    before = snapshot(repo.parent)
    with pytest.raises(OutputError, match=rf"^collect\.output: .*{message}") as err:
        collect(params_for(output, allow_outside_repo=allow), Layout(repo))
    assert "\n" not in str(err.value) and "(nothing was run)" in str(err.value)
    assert snapshot(repo.parent) == before and not (repo / "metrics").exists()


def test_an_output_outside_the_repository_is_written_when_allowed(repo):
    metrics = collect(params_for("../shared/offline", allow_outside_repo=True), Layout(repo))
    dataset = load_dataset(repo.parent / "shared" / "offline", "cpu", torch.Generator())
    assert len(dataset) == metrics["transitions"] == 256


def test_collect_replaces_its_own_dataset_and_removes_stale_temporaries(repo):
    collect(params_for("data/offline"), Layout(repo))
    stale = repo / "data" / ".offline.x1y2.tmp" / "transitions"
    stale.mkdir(parents=True)
    (stale / "obs.memmap").write_bytes(b"\0" * 64)  # a save killed mid-write
    (repo / "data" / ".offline.mine.tmp").mkdir()  # named like ours, holding someone's file
    (repo / "data" / ".offline.mine.tmp" / "notes.txt").write_text("keep\n")
    collect(params_for("data/offline", env_steps=512), Layout(repo))
    assert len(load_dataset(repo / "data" / "offline", "cpu", torch.Generator())) == 512
    assert sorted(p.name for p in (repo / "data").iterdir()) == [".offline.mine.tmp", "offline"]


def run_collect(root: Path, params: dict, fsize_limit: int | None = None):
    """`python -m pipelines collect` in `root`; with `fsize_limit`, a file size limit that
    stands in for a full disk (writes past it fail with EFBIG; Python ignores SIGXFSZ)."""

    def limit() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return subprocess.run(
        [sys.executable, "-m", "pipelines", "collect"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=limit if fsize_limit else None,
        timeout=300,
    )


def test_the_cli_refuses_a_source_directory_with_one_line(repo):
    before = snapshot(repo)
    done = run_collect(
        repo, {"env": {"name": "pendulum"}, "collect": {"policy": "random", "output": "src"}}
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: collect: collect.output: src is a directory that is not a dataset (it holds "
        "__init__.py); a dataset replaces only a dataset: choose another path or remove it "
        "yourself (nothing was run)"
    )
    assert snapshot(repo) == {**before, "params.yaml": snapshot(repo)["params.yaml"]}


def test_a_full_disk_is_one_line_and_leaves_the_previous_dataset(repo):
    collect(params_for("data/offline"), Layout(repo))
    before = snapshot(repo / "data") | snapshot(repo / "metrics")
    # 8,192 pendulum transitions: obs.memmap alone is 98,304 bytes, over the 64 KiB limit.
    params = {
        "env": {"name": "pendulum", "num_envs": 4},
        "collect": {"policy": "random", "env_steps": 8192, "output": "data/offline"},
    }
    done = run_collect(repo, params, fsize_limit=64 << 10)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: collect: disk full while writing dataset data/offline: previous dataset intact "
        "(File too large)"
    )
    assert snapshot(repo / "data") | snapshot(repo / "metrics") == before
    assert sorted(p.name for p in (repo / "data").iterdir()) == ["offline"]
    assert sorted(p.name for p in (repo / "metrics").iterdir()) == ["collect.json"]
    assert json.loads((repo / "metrics" / "collect.json").read_text())["transitions"] == 256


def test_a_count_off_whole_rounds_is_rounded_up_and_said(repo, capsys):
    """4 envs x 64 steps a round: 300 steps are 2 rounds, 512 steps, and the stage says so
    (its bar counts to 512, not past 100%)."""
    metrics = collect(params_for("data/offline", env_steps=300), Layout(repo))
    assert metrics["transitions"] == 512
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(
        "[collect] 512 env steps (collect.env_steps 300 rounded up to whole rounds of 4 envs x "
        "64 steps) of pendulum (4 envs)"
    )
    collect(params_for("data/offline", env_steps=256), Layout(repo))
    assert capsys.readouterr().out.startswith("[collect] 256 env steps of pendulum (4 envs) with")
