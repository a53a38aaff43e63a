"""The nightly regression check's verdict, against hand-made runs."""

import math
from datetime import date, datetime

import pytest

from pipelines.compare.aggregate import SeedRun
from pipelines.compare.regression import (
    fresh_seeds,
    judge,
    nightly_name,
    t_tail,
    verdict_markdown,
    worse_p,
)
from pipelines.compare.runs import Run, RunSource

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


def test_the_t_tail_matches_the_tables():
    # One-sided critical values: t(4) 3.747 and t(2) 6.965 at 0.01; t(3) 2.353 at 0.05.
    assert t_tail(3.747, 4) == pytest.approx(0.01, abs=2e-5)
    assert t_tail(6.965, 2) == pytest.approx(0.01, abs=2e-5)
    assert t_tail(2.3534, 3) == pytest.approx(0.05, abs=2e-5)
    assert t_tail(50.0, 1) == pytest.approx(0.5 - math.atan(50.0) / math.pi)  # Cauchy
    assert t_tail(-2.0, 3) == pytest.approx(1 - t_tail(2.0, 3))


def test_welch_by_hand():
    """[4, 5, 6] vs [1, 2, 3]: means 3 apart, each variance/n 1/3, so t = 3 / sqrt(2/3)
    = 3.674 on (2/3)^2 / ((1/3)^2 / 2 * 2) = 4 degrees of freedom."""
    p = worse_p([4.0, 5.0, 6.0], [1.0, 2.0, 3.0], higher_is_better=True)
    assert p == pytest.approx(t_tail(3 / (2 / 3) ** 0.5, 4))
    assert 0.01 < p < 0.011  # every seed worse, yet with 3 a side not beyond chance at 0.01
    assert worse_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], higher_is_better=False) == p
    assert worse_p([5.0, 5.0], [5.0, 5.0], higher_is_better=True) == 1.0  # nothing varies


def test_within_the_band_passes_on_success_and_env_steps():
    nightly = run("nightly-20261123-0300", [seed(10, 0.90), seed(11, 0.94)])
    verdict = judge(BASELINE, nightly)
    assert verdict.passed
    assert [(c.metric.key, c.status) for c in verdict.checks] == [
        ("success_rate", "within"),
        ("env_steps", "within"),
    ]
    success, steps = verdict.checks
    assert verdict.headline() == (
        "PASS: nightly-20261123-0300 vs HEAD (abc1234), nothing worse beyond chance: "
        f"success rate 0.92 (baseline seeds 0.88-0.95, p {success.p:.2g}); "
        f"env steps 225,280 (baseline seeds 225,280-245,760, p {steps.p:.2g})"
    )
    page = verdict_markdown(verdict, "/p/reports/compare.md")
    assert page.splitlines()[0] == verdict.headline()
    assert f"| success rate | 0.92 | 0.88 - 0.95 | {success.p:.2g} | within |" in page
    assert "/p/reports/compare.md" in page


def test_below_the_band_by_chance_passes_and_far_below_is_a_regression():
    """The first real nightly run: fresh seeds took 328k, 287k and 184k steps against the
    baseline's 225k-246k: below the band, but well within chance."""
    unlucky = run("nightly", [seed(10, 0.92, steps=s) for s in (327_680, 286_720, 184_320)])
    verdict = judge(BASELINE, unlucky)
    assert verdict.passed and verdict.checks[1].status == "below band"
    assert verdict.checks[1].p == pytest.approx(0.254, abs=0.001)

    slower = run("nightly", [seed(10, 0.92, steps=s) for s in (409_600, 430_080, 450_560)])
    verdict = judge(BASELINE, slower)
    assert not verdict.passed and verdict.checks[1].status == "regression"
    assert verdict.checks[1].p < 0.01
    assert verdict.headline().startswith("REGRESSION (env steps): nightly vs HEAD (abc1234): ")


def test_without_success_the_return_is_judged_and_better_is_no_regression():
    no_target = {"trainer": {"stop_at_eval_success": None}}
    cartpole = run("HEAD", [seed(0, ret=480.0), seed(1, ret=500.0)], no_target)
    (check,) = judge(
        cartpole, run("nightly", [seed(5, ret=500.0), seed(6, ret=510.0)], no_target)
    ).checks
    assert (check.metric.key, check.status) == ("eval_return", "better")
    failing = run("nightly", [seed(5, ret=20.0), seed(6, ret=22.0)], no_target)
    assert judge(cartpole, failing).checks[0].status == "regression"


def test_a_baseline_named_by_revision_is_shown_with_its_commit():
    head = Run(RunSource("HEAD", "bcdfee8" + "0" * 33, "commit"), params=STOPPING,
               seeds=BASELINE.seeds)  # fmt: skip
    nightly = run("nightly", [seed(10, 0.90), seed(11, 0.94)])
    assert judge(head, nightly).headline().startswith("PASS: nightly vs HEAD (bcdfee8), ")


def test_missing_results_and_single_seeds_are_not_judged():
    broken = run("nightly", [SeedRun(10, problems=["metrics/seeds/10/eval.json is missing"])])
    verdict = judge(BASELINE, broken)
    assert not verdict.passed and not verdict.checks
    assert verdict.headline() == (
        "NOT JUDGED: nightly: nightly: seed 10: metrics/seeds/10/eval.json is missing"
    )
    lone = judge(BASELINE, run("nightly", [seed(10, 0.9)]))
    assert not lone.passed and "fewer than 2 seeds" in lone.headline()
