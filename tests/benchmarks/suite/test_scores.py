"""Normalised scores and their aggregates (benchmarks/suite/scores.py) against
hand-computed numbers."""

import dataclasses
import math

import numpy as np
import pytest

from benchmarks.suite.scores import Task, aggregate, interval, iqm, normalised, stratified_resamples


def test_iqm_is_the_mean_of_the_middle_half():
    # 8 scores: int(8 / 4) = 2 cut from each end, mean of 3 4 5 6 = 4.5
    assert iqm(np.array([8.0, 1, 7, 2, 6, 3, 5, 4])) == 4.5
    # 5 scores: 1 cut from each end of 0 1 2 3 10, mean of 1 2 3 = 2
    assert iqm(np.array([10.0, 0, 3, 1, 2])) == 2.0
    # 3 scores: int(3 / 4) = 0 cut, the plain mean
    assert iqm(np.array([0.0, 0, 3])) == 1.0
    # along the last axis, row by row
    np.testing.assert_allclose(iqm(np.array([[4.0, 1, 3, 2], [0, 0, 8, 8]])), [2.5, 4.0])


def test_stratified_resamples_keep_every_task_as_often_as_the_data():
    """Task A scored 0 on both seeds, task B 1: every resample holds two 0s and two 1s, so
    its IQM (the mean of the middle two of 0 0 1 1) is always 0.5. Resampling the four
    scores as one pool would draw 0 0 0 0 or 1 1 1 1 too."""
    draws = stratified_resamples([np.zeros(2), np.ones(2)], 2_000, np.random.default_rng(0))
    assert draws.shape == (2_000, 4)
    assert interval(iqm(draws)) == (0.5, 0.5)


def test_bootstrap_interval_of_hand_enumerated_resamples():
    """Task A's seeds scored 0 and 1, task B's one seed 5. A resample of A is 00, 01, 10 or
    11 (1/4 each); B is always 5; three scores, nothing cut: IQM (a1 + a2 + 5) / 3, so 5/3,
    2 or 7/3 with probabilities 1/4, 1/2, 1/4. The 95% interval is (5/3, 7/3)."""
    values = iqm(stratified_resamples([np.array([0.0, 1.0]), np.array([5.0])], 2_000,
                                      np.random.default_rng(1)))  # fmt: skip
    np.testing.assert_allclose(np.unique(values), [5 / 3, 2, 7 / 3])
    assert np.mean(np.isclose(values, 2)) == pytest.approx(0.5, abs=0.05)
    np.testing.assert_allclose(interval(values), (5 / 3, 7 / 3))


def test_normalised_score_puts_random_at_0_and_sb3s_mean_at_1():
    # random -100, SB3's mean 100: a span of 200
    assert normalised(100.0, -100.0, 100.0) == 1.0
    assert normalised(0.0, -100.0, 100.0) == 0.5
    assert normalised(-100.0, -100.0, 100.0) == 0.0
    assert normalised(300.0, -100.0, 100.0) == 2.0
    # SB3 no better than random (MountainCar's -200 against -200): no scale, no score
    assert math.isnan(normalised(-150.0, -200.0, -200.0))
    assert math.isnan(normalised(-150.0, -100.0, -200.0))


def test_aggregate_over_tasks_where_sb3_beats_random():
    """A: random 0, SB3 90 110 (mean 100): SB3's scores 0.9 1.1, ours (200 300) 2 3.
    B: random -10, SB3 10 30 (mean 20, span 30): SB3's 2/3 4/3, ours (20 50) 1 2.
    C: SB3 at random's return: left out. Ours 2 3 1 2, middle two of 1 2 2 3: IQM 2;
    SB3's middle two of 2/3 0.9 1.1 4/3: IQM 1; ratio 2. Ours' mean score 2.5 and 1.5:
    both >= 0.9. CPU (1 + 2) / (4 + 4) = 0.375."""
    tasks = [
        Task("A", 1, 0.0, {"ours": [200.0, 300.0], "sb3": [90.0, 110.0]},
             {"ours": [1.0, 1.0], "sb3": [4.0, 4.0]}),
        Task("B", 1, -10.0, {"ours": [20.0, 50.0], "sb3": [10.0, 30.0]},
             {"ours": [2.0, 2.0], "sb3": [4.0, 4.0]}),
        Task("C", 1, -200.0, {"ours": [-100.0], "sb3": [-200.0]},
             {"ours": [1.0], "sb3": [100.0]}),
    ]  # fmt: skip
    agg = aggregate(tasks, np.random.default_rng(0))
    assert agg is not None
    assert agg["tasks"] == 2
    assert agg["iqm_ours"][0] == pytest.approx(2.0)
    assert agg["iqm_sb3"][0] == pytest.approx(1.0)
    assert agg["iqm_ratio"][0] == pytest.approx(2.0)
    low, high = agg["iqm_ours"][1:]
    assert 1.0 <= low <= 2.0 <= high <= 3.0  # inside the range of ours' scores
    assert agg["share_at_0.9"] == 1.0
    assert agg["cpu_ratio"] == pytest.approx(0.375)
    assert aggregate(tasks[2:], np.random.default_rng(0)) is None


def test_cpu_ratio_sums_only_tasks_timed_on_one_kind_of_cpu():
    """A: ours and SB3 on the same CPU, (1 + 1) / (4 + 4). B: SB3's runs on another kind of
    CPU, so its seconds compare machines: left out of the sum, whose ratio stays A's 0.25,
    while B's scores still count (2 tasks)."""
    avx512, avx2 = ["AMD EPYC AVX512"], ["AMD EPYC AVX2"]
    tasks = [
        Task("A", 1, 0.0, {"ours": [200.0, 300.0], "sb3": [90.0, 110.0]},
             {"ours": [1.0, 1.0], "sb3": [4.0, 4.0]}, {"ours": avx512, "sb3": avx512}),
        Task("B", 1, -10.0, {"ours": [20.0, 50.0], "sb3": [10.0, 30.0]},
             {"ours": [2.0, 2.0], "sb3": [100.0, 100.0]}, {"ours": avx512, "sb3": avx2}),
    ]  # fmt: skip
    assert tasks[0].side_by_side() and not tasks[1].side_by_side()
    agg = aggregate(tasks, np.random.default_rng(0))
    assert agg is not None
    assert agg["tasks"] == 2 and agg["cpu_tasks"] == 1
    assert agg["cpu_ratio"] == pytest.approx(0.25)
    assert math.isnan(aggregate(tasks[1:], np.random.default_rng(0))["cpu_ratio"])


def test_collect_records_the_cpu_each_run_trained_on(tmp_path):
    """Each result names its CPU in `versions`: a task whose runs name two kinds is not side
    by side."""
    import json

    from benchmarks.suite.jobs import Job, settings_hash
    from benchmarks.suite.scores import collect

    jobs = [Job("sac", "Pendulum-v1", impl, 0, 1_000) for impl in ("ours", "sb3")]
    for job, kernels in zip(jobs, ("AVX512", "AVX2"), strict=True):
        result = {
            "job": dataclasses.asdict(job), "return": -500.0, "cpu_s": 10.0, "wall_s": 11.0,
            "env_steps": 1_000, "eval_episodes": 10, "settings": settings_hash(job),
            "versions": {"cpu": "AMD EPYC", "cpu_kernels": kernels},
        }  # fmt: skip
        (tmp_path / job.filename).write_text(json.dumps(result))
    (task,) = collect(jobs, tmp_path, {"Pendulum-v1": -1_200.0})
    assert task.machines == {"ours": ["AMD EPYC AVX512"], "sb3": ["AMD EPYC AVX2"]}
    assert not task.side_by_side()
