"""The nightly regression check's verdict, against hand-made runs."""

from datetime import date, datetime

import pytest

from pipelines.aggregate import SeedRun
from pipelines.regression import fresh_seeds, judge, nightly_name, verdict_markdown
from pipelines.runs import Run, RunSource

STOPPING = {"trainer": {"stop_at_eval_success": 0.9, "stop_at_eval_return": None}}


def seed(s, success=None, ret=-20.0, steps=225_280):
    evaluation = {"return_mean": ret} | ({} if success is None else {"success_rate": success})
    return SeedRun(s, train={"env_steps": steps, "wall_s": 15.0}, evaluation=evaluation)


def run(label, seeds, params=STOPPING):
    return Run(RunSource(label, "0" * 40, "commit"), params=params, seeds=seeds)


BASELINE = run("HEAD (abc1234)", [seed(0, 0.88, steps=245_760), seed(1, 0.92), seed(2, 0.95)])


def test_names_and_seeds_are_dated():
    assert nightly_name(datetime(2026, 11, 23, 3, 0)) == "nightly-20261123-0300"
    assert fresh_seeds(3, date(2026, 11, 23)) == [2026112300, 2026112301, 2026112302]
    with pytest.raises(ValueError, match="1 to 100"):
        fresh_seeds(101, date(2026, 11, 23))


def test_within_the_band_passes_on_success_and_env_steps():
    nightly = run("nightly-20261123-0300", [seed(10, 0.90), seed(11, 0.94)])
    verdict = judge(BASELINE, nightly)
    assert verdict.passed
    assert [(c.metric.key, c.status) for c in verdict.checks] == [
        ("success_rate", "within"),
        ("env_steps", "within"),
    ]
    assert verdict.headline() == (
        "PASS: nightly-20261123-0300 within the HEAD (abc1234) seed band or better: "
        "success rate 0.92 in [0.88, 0.95]; env steps 225,280 in [225,280, 245,760]"
    )
    page = verdict_markdown(verdict, "/p/reports/compare.md")
    assert page.splitlines()[0] == verdict.headline()
    assert "| success rate | 0.92 | 0.88 | 0.95 | within |" in page
    assert page.rstrip().endswith("/p/reports/compare.md")


def test_slower_learning_is_a_regression_even_at_the_same_final_success():
    """With a stop target every run ends near it: the env steps show a slower learner."""
    nightly = run("nightly", [seed(10, 0.91, steps=327_680), seed(11, 0.93, steps=307_200)])
    verdict = judge(BASELINE, nightly)
    assert not verdict.passed
    assert verdict.headline().startswith("REGRESSION: nightly vs the HEAD (abc1234) seed band: ")
    assert "env steps 317,440 worse than [225,280, 245,760]" in verdict.headline()


def test_better_than_the_band_passes_and_without_success_the_return_is_judged():
    fewer = run("nightly", [seed(10, 0.97, steps=184_320)])
    assert judge(BASELINE, fewer).passed
    assert [c.status for c in judge(BASELINE, fewer).checks] == ["better", "better"]
    no_target = {"trainer": {"stop_at_eval_success": None}}
    cartpole = run("HEAD", [seed(0, ret=480.0), seed(1, ret=500.0)], no_target)
    (check,) = judge(cartpole, run("nightly", [seed(5, ret=420.0)], no_target)).checks
    assert (check.metric.key, check.status) == ("eval_return", "worse")


def test_missing_results_are_not_judged():
    broken = run("nightly", [SeedRun(10, problems=["metrics/seeds/10/eval.json is missing"])])
    verdict = judge(BASELINE, broken)
    assert not verdict.passed and not verdict.checks
    assert verdict.headline() == (
        "NOT JUDGED: nightly: nightly: seed 10: metrics/seeds/10/eval.json is missing"
    )
