"""`compare` over git revisions and the workspace (DVC experiments: test_dvc_pipeline.py)."""

import json
import shutil
import statistics
import subprocess

import pytest
import yaml

from pipelines.compare.aggregate import machine_line
from pipelines.compare.page import compare, differing_params, flatten
from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.evaluate import evaluate
from pipelines.stages.train import train

TINY = {
    "name": "tiny",
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"lr": 1e-3, "num_epochs": 2, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 8 * 16 * 4, "num_steps": 16, "eval_every_iters": 2,
                "eval_episodes": 2},
    "evaluation": {"episodes": 4},
}  # fmt: skip


def git(root, *args):
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def run_variant(root, data):
    """Write params.yaml and run the train and evaluate stages of every seed."""
    (root / "params.yaml").write_text(yaml.safe_dump(data))
    params = parse_params(data)
    for seed in params.seeds:
        train(params, Layout(root, seed))
        evaluate(params, Layout(root, seed))


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def table(page):
    """The runs table of compare.md: header cells and one list of cells per run."""
    lines = [line for line in page.splitlines() if line.startswith("|")]
    split = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return split[0], split[2:]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("compare")
    git(root, "init", "-q")
    run_variant(root, TINY)  # A: lr 1e-3, seed 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "A")
    variant_b = {**TINY, "seeds": [0, 1], "algorithm": {"ppo": {**TINY["algorithm"]["ppo"],
                                                                "lr": 3e-4}}}  # fmt: skip
    run_variant(root, variant_b)  # B: lr 3e-4, seeds 0 and 1
    git(root, "add", "-A")
    git(root, "commit", "-qm", "B")
    return root


def test_three_runs_show_their_parameter_differences_and_seed_aggregates(project):
    root = project
    variant_c = {**TINY, "policy": {"hidden_sizes": [8], "activation": "relu"}}
    run_variant(root, variant_c)  # C, in the workspace only
    page = compare(root, ["HEAD~1", "HEAD", "workspace"])
    header, rows = table((root / "reports" / "compare.md").read_text())
    assert [row[0] for row in rows] == ["HEAD~1", "HEAD", "workspace"]
    assert header[4:7] == ["algorithm.ppo.lr", "policy.hidden_sizes", "seeds"]
    assert [row[4:7] for row in rows] == [
        ["0.001", "[16]", "[0]"],
        ["0.0003", "[16]", "[0, 1]"],
        ["0.001", "[8]", "[0]"],
    ]
    assert [row[3] for row in rows] == ["1", "2", "1"]  # complete seeds
    # B's evaluation return: mean ± sample std over its two seeds, read back from git.
    returns = [
        json.loads(git(root, "show", f"HEAD:metrics/seeds/{s}/eval.json"))["return_mean"]
        for s in (0, 1)
    ]
    column = header.index("evaluation return")
    mean, std = statistics.fmean(returns), statistics.stdev(returns)
    assert rows[1][column] == f"{mean:,.1f} ± {std:,.1f}"
    a_return = json.loads(git(root, "show", "HEAD~1:metrics/seeds/0/eval.json"))["return_mean"]
    assert rows[0][column] == f"{a_return:,.1f}"  # one seed: no std
    assert rows[0][header.index("env steps")] == "512"

    figures = root / "reports" / "compare"
    for name in ("return_vs_steps.png", "return_vs_wall.png"):
        assert png_size(figures / name) == (800, 450)
    assert not (figures / "success_vs_steps.png").exists()  # CartPole reports no success
    html = (root / "reports" / "compare.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "<td>HEAD~1</td>" in html
    assert len(page.runs) == 3 and "None." in (root / "reports" / "compare.md").read_text()


def test_missing_and_malformed_files_are_reported_and_the_rest_renders(project):
    root = project
    git(root, "checkout", "-q", "--", ".")  # the workspace back at B
    (root / "metrics" / "seeds" / "1" / "eval.json").write_text("{not json")
    (root / "metrics" / "seeds" / "0" / "curve.csv").unlink()
    compare(root, ["HEAD~1", "workspace"])
    page = (root / "reports" / "compare.md").read_text()
    header, rows = table(page)
    assert rows[1][header.index("seeds")] == "0 of 2"
    assert rows[1][header.index("evaluation return")] == "-"
    assert rows[0][header.index("evaluation return")] != "-"  # the good run still renders
    assert "- workspace: metrics/seeds/1/eval.json: malformed JSON" in page
    assert "- workspace: metrics/seeds/0/curve.csv is missing" in page
    html = (root / "reports" / "compare.html").read_text()
    assert '<li class="problem">workspace: metrics/seeds/1/eval.json: malformed JSON' in html
    assert png_size(root / "reports" / "compare" / "return_vs_steps.png") == (800, 450)

    (root / "params.yaml").write_text("seeds: [0,\n")
    compare(root, ["HEAD~1", "workspace"])
    page = (root / "reports" / "compare.md").read_text()
    assert "- workspace: params.yaml: malformed YAML" in page
    git(root, "checkout", "-q", "--", ".")


def test_a_run_shows_the_study_named_like_its_experiment_else_its_study_name_s(project):
    root = project
    reports = root / "reports"
    (reports / "search").mkdir(parents=True, exist_ok=True)
    (reports / "search" / "summary.md").write_text("# Search: params.yaml's study\n")
    (reports / "search-tiny").mkdir()
    (reports / "search-tiny" / "summary.md").write_text("# Search: tiny\n")
    media = reports / "compare" / "media"
    try:
        compare(root, ["HEAD", "workspace"])
        page = (reports / "compare.md").read_text()
        assert "- HEAD: no video or search" in page  # HEAD's tree has neither summary
        assert (media / "workspace-search.md").read_text() == "# Search: tiny\n"
        shutil.rmtree(reports / "search-tiny")
        compare(root, ["workspace"])
        assert (media / "workspace-search.md").read_text() == "# Search: params.yaml's study\n"
        # An experiment that confirms a trial carries the study's section: its study_name.
        (reports / "search-wide").mkdir()
        (reports / "search-wide" / "summary.md").write_text("# Search: wide\n")
        params = yaml.safe_load((root / "params.yaml").read_text())
        params["search"] = {**params.get("search", {}), "study_name": "wide"}
        (root / "params.yaml").write_text(yaml.safe_dump(params))
        compare(root, ["workspace"])
        assert (media / "workspace-search.md").read_text() == "# Search: wide\n"
    finally:
        git(root, "checkout", "-q", "--", "params.yaml")
        for name in ("search", "search-tiny", "search-wide"):
            shutil.rmtree(reports / name, ignore_errors=True)


def test_runs_trained_on_other_kernels_are_named_and_one_machine_is_not(project):
    root = project
    git(root, "checkout", "-q", "--", ".")  # the workspace back at B
    compare(root, ["HEAD~1", "HEAD"])
    assert "Where the runs were trained" not in (root / "reports" / "compare.md").read_text()

    # The workspace's seed 0 as if trained where torch picked other kernels.
    path = root / "metrics" / "seeds" / "0" / "provenance.json"
    machine = json.loads(path.read_text())
    moved = {**machine, "cpu_kernels": "AVX2" if machine["cpu_kernels"] != "AVX2" else "DEFAULT"}
    path.write_text(json.dumps(moved))
    try:
        compare(root, ["HEAD", "workspace"])
        page = (root / "reports" / "compare.md").read_text()
        assert "## Where the runs were trained" in page
        here = machine_line(machine)
        assert f"- HEAD: {here}\n" in page  # both seeds on this machine: one line
        assert f"- workspace: seed 0: {machine_line(moved)}; seed 1: {here}\n" in page
        html = (root / "reports" / "compare.html").read_text()
        assert "<h2>Where the runs were trained</h2>" in html
    finally:
        git(root, "checkout", "-q", "--", ".")


def test_param_differences_treat_missing_keys_and_lists_as_values():
    runs = [{"a": {"b": 1, "c": [1, 2]}}, {"a": {"b": 1, "c": [1, 2], "d": 0}}]
    assert flatten(runs[0]) == {"a.b": 1, "a.c": [1, 2]}

    class Fake:
        def __init__(self, params):
            self.params = params

    assert differing_params([Fake(p) for p in runs]) == ["a.d"]
    assert differing_params([Fake(runs[0]), Fake(None)]) == []
    # The search and schedule sections shape no run's result: never columns.
    searched = [{**p, "search": {"n_trials": n}, "schedule": {"cron": c}} for p, n, c in
                zip(runs, (16, 24), ("0 3 * * *", "0 4 * * *"), strict=True)]  # fmt: skip
    assert differing_params([Fake(p) for p in searched]) == ["a.d"]


def test_band_starts_where_every_seed_has_started_and_holds_seeds_that_ended():
    from pipelines.compare.aggregate import band

    seed_a = [{"t": 1.0, "r": 10.0}, {"t": 3.0, "r": 30.0}, {"t": 5.0, "r": 50.0}]
    seed_b = [{"t": 2.0, "r": 0.0}, {"t": 4.0, "r": 20.0}]  # stopped early
    curve = band([seed_a, seed_b], "t", "r")
    assert curve.x.tolist() == [2.0, 3.0, 4.0, 5.0]
    # at t=2: a interpolates to 20, b is 0; at t=5, b still counts with its last value, 20
    # (the mean of the seeds still running, a's 50 alone, jumped there)
    assert curve.mean.tolist() == [10.0, 20.0, 30.0, 35.0]
    assert curve.low.tolist() == [0.0, 10.0, 20.0, 20.0]
    assert curve.high.tolist() == [20.0, 30.0, 40.0, 50.0]
    assert curve.seeds == 2
