"""Real `dvc repro` and `dvc exp run` of the pipeline, end to end, in a throwaway git repo."""

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.common import merged, scratch_project

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "name": "tiny",
    "seeds": [0, 1],
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"lr": 1e-3, "num_epochs": 2, "num_minibatches": 2}},
    "trainer": {
        "total_env_steps": 512,
        "num_steps": 16,
        "eval_every_iters": 2,
        "eval_episodes": 2,
        "stop_at_eval_success": None,
    },
    "evaluation": {"episodes": 4},
    "video": {"episodes": 2, "frame_size": 32, "max_steps": 10},
    "search": {
        "study_name": "tiny",
        "space": {
            "algorithm": {"ppo": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}}
        },
        "overrides": {"trainer": {"total_env_steps": 256}},
        "n_trials": 3,
    },
}


def run(args, cwd, env):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory, git_dvc_env):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("project")
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    scratch_project(root, git_dvc_env, merged(defaults, TINY))
    return root, git_dvc_env


def dvc_repro(project):
    root, env = project
    return run([sys.executable, "-m", "dvc", "repro"], root, env)


SEEDED = ("train@0", "train@1", "evaluate@0", "evaluate@1")


def test_repro_runs_end_to_end_then_skips_then_reruns_what_a_param_change_touches(project):
    root, env = project
    first = dvc_repro(project)
    for stage in ("plugins", *SEEDED, "video", "report"):
        assert f"Running stage '{stage}'" in first
    for seed in (0, 1):
        train = json.loads((root / "metrics" / "seeds" / str(seed) / "train.json").read_text())
        evaluation = json.loads((root / "metrics" / "seeds" / str(seed) / "eval.json").read_text())
        assert train["env_steps"] == 512 and evaluation["episodes"] == 4
        assert (root / "outputs" / "seeds" / str(seed) / "checkpoints" / "final.pt").is_file()
    summary = json.loads((root / "metrics" / "summary.json").read_text())
    assert summary["seeds"] == 2 and summary["env_steps_mean"] == 512
    assert (root / "outputs" / "video" / "episodes.mp4").stat().st_size > 0
    report = (root / "reports" / "run" / "report.md").read_text()
    assert report.startswith("# tiny") and "seeds [0, 1]" in report
    assert "metrics/seeds/1/curve.csv" in run(
        [sys.executable, "-m", "dvc", "plots", "show", "--json"], root, env
    )

    second = dvc_repro(project)  # only `plugins` runs, on every repro; its file is unchanged
    assert re.findall(r"Running stage '([^']+)'", second) == ["plugins"]
    for stage in (*SEEDED, "video", "report"):
        assert f"Stage '{stage}' didn't change, skipping" in second

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["evaluation"]["episodes"] = 6  # evaluation only: train must not re-run
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    third = dvc_repro(project)
    assert "Running stage 'evaluate@0'" in third and "Running stage 'evaluate@1'" in third
    assert "Running stage 'train@" not in third and "Running stage 'video'" not in third

    params["seeds"] = [0, 1, 2]  # one more seed: only its stages and the report run
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    more = dvc_repro(project)
    assert "Running stage 'train@2'" in more and "Running stage 'evaluate@2'" in more
    assert "Running stage 'train@0'" not in more, more
    assert "Running stage 'video'" not in more
    assert json.loads((root / "metrics" / "summary.json").read_text())["seeds"] == 3

    # An algorithm parameter: train and everything after it, for every seed. A dry run says
    # so (what it lists is what `dvc repro` runs; the repros above show that it does).
    params["algorithm"]["ppo"]["lr"] = 5e-4
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    fourth = run([sys.executable, "-m", "dvc", "repro", "--dry"], root, env)
    for stage in (*SEEDED, "train@2", "evaluate@2", "video", "report"):
        assert f"Running stage '{stage}'" in fourth
    params["algorithm"]["ppo"]["lr"] = TINY["algorithm"]["ppo"]["lr"]  # back to the lock
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    fifth = run([sys.executable, "-m", "dvc", "repro", "--dry"], root, env)
    assert re.findall(r"Running stage '([^']+)'", fifth) == ["plugins"], fifth


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
    assert "3 of 4 trials so far" in out
    assert json.loads((root / "metrics" / "search.json").read_text())["trials"] == 4


def test_experiments_are_compared_with_their_baseline(project):
    root, env = project
    dvc_repro(project)
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "baseline results"], root, env)
    dvc = [sys.executable, "-m", "dvc"]
    run([*dvc, "exp", "run", "-n", "small-lr", "-S", "++algorithm.ppo.lr=0.0001"], root, env)
    # `dvc exp show` fits a terminal: the metric columns are the means over seeds (each
    # seed's 40 numbers are outputs of `type: metrics`), and --only-changed leaves the
    # changed param, the summary and the checkpoints evaluate read.
    header = run([*dvc, "exp", "show", "--csv", "--only-changed"], root, env).splitlines()[0]
    columns = [c for c in header.split(",") if c not in ("Experiment", "rev", "typ", "Created")]
    assert "algorithm.ppo.lr" in columns and "eval_return_mean" in columns
    assert not [c for c in columns if c.startswith("metrics/seeds/")], columns
    assert len(columns) <= 16, columns
    out = run([sys.executable, "-m", "pipelines", "compare"], root, env)
    assert "[compare] 2 runs" in out  # HEAD and the experiment; the workspace equals it
    page = (root / "reports" / "compare.md").read_text()
    header, _, *rows = [line for line in page.splitlines() if line.startswith("|")][:4]
    assert "algorithm.ppo.lr" in header
    assert rows[0].startswith("| HEAD (") and rows[1].startswith("| small-lr |")
    assert "| 0.0001 |" in rows[1]
    assert (root / "reports" / "compare" / "media" / "small-lr.mp4").stat().st_size > 0
    html = (root / "reports" / "compare.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "small-lr" in html

    by_name = run([sys.executable, "-m", "pipelines", "compare", "small-lr", "HEAD"], root, env)
    assert "[compare] 2 runs" in by_name
    bad = subprocess.run(
        [sys.executable, "-m", "pipelines", "compare", "no-such-run"],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "'no-such-run' is neither a DVC experiment" in bad.stderr


def test_the_nightly_regression_check_judges_fresh_seeds_and_leaves_the_workspace(
    project, prefect_api_url, monkeypatch
):
    """The scheduled flow: a dated experiment on fresh seeds, a verdict, the workspace as
    it was. Tiny runs land anywhere in or out of the band, so the verdict is checked against
    the numbers in the experiment's own files, not assumed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from pipelines.compare.regression import worse_p
    from pipelines.orchestration import flows

    root, env = project
    run([sys.executable, "-m", "pipelines", "baseline"], root, env)  # after earlier tests
    dvc_repro(project)
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "baseline results", "--allow-empty"], root, env)
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    baseline = yaml.safe_load((root / "params.yaml").read_text())

    state = flows.regression_flow(str(root), return_state=True)

    exps = run([sys.executable, "-m", "dvc", "exp", "list", "--name-only"], root, env).split()
    (name,) = [e for e in exps if e.startswith("nightly-")]
    assert re.fullmatch(r"nightly-\d{8}-\d{4}", name)
    show = lambda path: run(["git", "show", f"{ref_of(root, env, name)}:{path}"], root, env)  # noqa: E731
    seeds = yaml.safe_load(show("params.yaml"))["seeds"]
    day = int(name.split("-")[1])
    assert seeds == [day * 100 + k for k in range(len(baseline["seeds"]))]
    nightly = [json.loads(show(f"metrics/seeds/{s}/eval.json"))["return_mean"] for s in seeds]
    band = [
        json.loads((root / "metrics" / "seeds" / str(s) / "eval.json").read_text())["return_mean"]
        for s in baseline["seeds"]
    ]
    # cartpole: no success, no stop target; a one-sided Welch t-test over the seeds.
    p = worse_p(band, nightly, higher_is_better=True)
    passed = p >= 0.01
    assert state.is_completed() == passed
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["tiny-nightly"]))
        )
    first = artifact.data.splitlines()[0]
    assert first.startswith("PASS: " if passed else "REGRESSION (") and name in first
    mean = statistics.fmean(nightly)
    assert (
        f"evaluation return {mean:,.1f} (baseline seeds {min(band):,.1f}-{max(band):,.1f}, "
        f"p {p:.2g})" in first
    )
    assert str(root / "reports" / "compare.md") in artifact.data
    # The workspace keeps the baseline: no tracked file changed, params.yaml included.
    assert run(["git", "status", "--porcelain", "--untracked-files=no"], root, env) == ""
    assert yaml.safe_load((root / "params.yaml").read_text()) == baseline


def ref_of(root, env, name):
    """The git commit of a DVC experiment, by name."""
    out = run([sys.executable, "-m", "dvc", "exp", "list", "--all-commits"], root, env)
    assert name in out
    refs = run(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"], root, env)
    (sha,) = [line.split()[1] for line in refs.splitlines() if line.split()[0].endswith(f"/{name}")]
    return sha
