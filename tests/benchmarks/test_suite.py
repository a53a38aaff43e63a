"""The suite benchmark (benchmarks/suite.py): its statistics against hand-computed numbers,
its schedule and resumability with a fake runner, and one tiny real run of ours and SB3."""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.suite import (
    CLASSIC,
    MUJOCO,
    Job,
    Task,
    aggregate,
    beyond_floor,
    cached,
    claim,
    claim_path,
    default_steps,
    estimate,
    interval,
    iqm,
    load_result,
    main,
    normalised,
    random_return,
    read_json,
    run_pending,
    schedule,
    simulator_cost,
    still_return,
    stratified_resamples,
    suite_envs,
)
from pipelines.files import write_json
from pipelines.params.sections import RuntimeParams

REPO = Path(__file__).resolve().parents[2]


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


def test_the_suite_its_budgets_and_the_turns_of_its_schedule():
    assert len(MUJOCO) == 11 and "HumanoidStandup-v5" in MUJOCO
    assert suite_envs("ppo") == [*MUJOCO, *CLASSIC]
    assert suite_envs("sac") == [*MUJOCO, "MountainCarContinuous-v0", "Pendulum-v1"]
    assert default_steps("ppo", "Hopper-v5") == 300_000
    assert default_steps("ppo", "Acrobot-v1") == 100_000
    assert default_steps("sac", "Hopper-v5") == 100_000
    jobs = schedule("ppo", ["CartPole-v1"], [0, 1], ["ours", "sb3"], None)
    assert [(j.seed, j.impl, j.steps) for j in jobs] == [
        (0, "ours", 100_000), (0, "sb3", 100_000), (1, "sb3", 100_000), (1, "ours", 100_000),
    ]  # fmt: skip


class FakeRunner:
    """Stands in for training: records the jobs it runs; raises on `interrupt_at`."""

    def __init__(self, interrupt_at: Job | None = None) -> None:
        self.calls: list[Job] = []
        self.interrupt_at = interrupt_at

    def __call__(self, job: Job, eval_episodes: int) -> dict[str, Any]:
        self.calls.append(job)
        if job == self.interrupt_at:
            raise KeyboardInterrupt
        return {"return": 10.0 * job.seed, "cpu_s": 0.01 * job.steps + 2.0, "wall_s": 3.0,
                "env_steps": job.steps}  # fmt: skip


JOBS = schedule("ppo", ["CartPole-v1"], [0, 1, 2], ["ours"], 1_000)


def test_finished_runs_are_skipped_and_partial_ones_redone(tmp_path: Path):
    run_pending(JOBS[:1], tmp_path, FakeRunner())  # seed 0 finishes
    (tmp_path / JOBS[1].filename).write_text('{"job": {"algorithm": "ppo", ')  # cut short
    runner = FakeRunner()
    run_pending(JOBS, tmp_path, runner, eval_episodes=2)
    assert runner.calls == JOBS[1:]
    result = load_result(tmp_path / JOBS[1].filename, JOBS[1])
    assert result is not None
    assert (result["return"], result["env_steps"], result["eval_episodes"]) == (10.0, 1_000, 2)
    assert result["versions"]["torch_threads"] >= 1
    again = FakeRunner()
    run_pending(JOBS, tmp_path, again)
    assert again.calls == []
    # a file of another job (a different budget) under this name is not this job's result
    assert load_result(tmp_path / JOBS[1].filename, Job("ppo", "CartPole-v1", "ours", 1, 2)) is None


def test_a_result_of_ours_with_other_settings_is_redone(tmp_path: Path):
    """Results are kept across sessions: when the defaults `ours` trains change (a new
    family setting), its earlier results are stale, and rerun; SB3's stay."""
    ours, sb3 = (
        Job("ppo", "CartPole-v1", "ours", 0, 1_000),
        Job("ppo", "CartPole-v1", "sb3", 0, 1_000),
    )
    run_pending([ours, sb3], tmp_path, FakeRunner())
    stored = json.loads((tmp_path / ours.filename).read_text())
    assert stored["settings"] and load_result(tmp_path / ours.filename, ours) is not None
    stored["settings"] = "trained with the defaults of before"
    (tmp_path / ours.filename).write_text(json.dumps(stored))
    runner = FakeRunner()
    run_pending([ours, sb3], tmp_path, runner)
    assert runner.calls == [ours]


def test_an_eager_result_is_redone_once_the_default_compiles_the_run(tmp_path: Path, monkeypatch):
    """Whether `runtime.compile`'s default compiles a run is part of its settings: an eager
    result of ours is stale once the default compiles that job (SB3's stays)."""
    ours, sb3 = (
        Job("ppo", "CartPole-v1", "ours", 0, 1_000),
        Job("ppo", "CartPole-v1", "sb3", 0, 1_000),
    )
    run_pending([ours, sb3], tmp_path, FakeRunner())
    eager = json.loads((tmp_path / ours.filename).read_text())["settings"]
    assert not eager.endswith("+compiled")
    monkeypatch.setattr(RuntimeParams, "compiles", lambda self, cfg, world_size=1: (True, ""))
    runner = FakeRunner()
    run_pending([ours, sb3], tmp_path, runner)
    assert runner.calls == [ours]
    stored = json.loads((tmp_path / ours.filename).read_text())
    assert stored["settings"] == eager + "+compiled"


def test_a_job_another_process_finished_meanwhile_is_skipped(tmp_path: Path):
    """Two processes share one results directory: the other one finishes seed 2 while this
    one runs seed 0, so this one runs seeds 0 and 1 only."""

    class OtherProcessFinishes(FakeRunner):
        def __call__(self, job: Job, eval_episodes: int) -> dict[str, Any]:
            if job == JOBS[0]:
                run_pending(JOBS[2:], tmp_path, FakeRunner())
            return super().__call__(job, eval_episodes)

    runner = OtherProcessFinishes()
    run_pending(JOBS, tmp_path, runner)
    assert runner.calls == JOBS[:2]
    assert all(load_result(tmp_path / job.filename, job) is not None for job in JOBS)


def _claim_of(tmp_path: Path, job: Job, pid: int) -> None:
    claim_file = tmp_path / f"{job.filename}.running"
    claim_file.write_text(json.dumps({"host": socket.gethostname(), "pid": pid}))


def test_a_job_another_live_process_is_running_is_skipped(tmp_path: Path, capsys):
    """Seed 1 is claimed by a live process on this host (this test's parent): it is left to
    that process; the claims of this one's own runs are gone once they end."""
    _claim_of(tmp_path, JOBS[1], os.getppid())
    runner = FakeRunner()
    run_pending(JOBS, tmp_path, runner)
    assert runner.calls == [JOBS[0], JOBS[2]]
    assert f"running in {socket.gethostname()} pid {os.getppid()}" in capsys.readouterr().out
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".running"))
    assert left == [f"{JOBS[1].filename}.running"]  # the other process's, untouched


def test_a_claim_left_by_a_process_that_is_gone_is_taken_over(tmp_path: Path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _claim_of(tmp_path, JOBS[0], gone.pid)
    runner = FakeRunner()
    run_pending(JOBS[:1], tmp_path, runner)
    assert runner.calls == JOBS[:1]
    assert not (tmp_path / f"{JOBS[0].filename}.running").exists()


STOPPED_MID_RUN = """
import sys, time
from pathlib import Path
from benchmarks.suite import Job, run_pending, stoppable

def slow(job, episodes):
    time.sleep(60)

with stoppable():
    run_pending([Job("ppo", "CartPole-v1", "ours", 0, 1_000)], Path(sys.argv[1]), runner=slow)
"""


@pytest.mark.parametrize(
    ("stop", "why"), [(signal.SIGTERM, "stopped by SIGTERM"), (signal.SIGINT, "interrupted")]
)
def test_a_run_stopped_by_kill_removes_its_claim(tmp_path: Path, stop: int, why: str):
    """`kill` or `kill -INT` (here to a process that inherited SIGINT ignored, as a job
    started with `&` from a script does) mid-run: the process ends and its claim goes with
    it, so no host sharing the results finds the job held."""
    job = Job("ppo", "CartPole-v1", "ours", 0, 1_000)
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPED_MID_RUN, str(tmp_path)], cwd=REPO, text=True,
        stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not claim_path(tmp_path, job).exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no claim was made"
            time.sleep(0.05)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1
        assert err.strip() == f"suite: {why}; finished runs are kept: run it again to go on"
    finally:
        proc.kill()
    assert not claim_path(tmp_path, job).exists()
    assert not (tmp_path / job.filename).exists()  # and no result of a run that did not end


def test_another_hosts_claim_is_respected(tmp_path: Path):
    claim_file = tmp_path / f"{JOBS[0].filename}.running"
    claim_file.write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    assert claim(tmp_path, JOBS[0]) == f"elsewhere pid 1 ({claim_file.name})"
    claim_file.write_text("")  # created, not yet written by its owner: held
    assert claim(tmp_path, JOBS[0]) == f"? pid ? ({claim_file.name})"
    assert claim(tmp_path, JOBS[1]) is None  # a free job: claimed, by this process
    held = json.loads((tmp_path / f"{JOBS[1].filename}.running").read_text())
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()


def test_an_interrupted_run_leaves_no_result_and_is_redone(tmp_path: Path):
    with pytest.raises(KeyboardInterrupt):
        run_pending(JOBS, tmp_path, FakeRunner(interrupt_at=JOBS[1]))
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOBS[0].filename]
    runner = FakeRunner()
    run_pending(JOBS, tmp_path, runner)
    assert runner.calls == JOBS[1:]


def test_estimate_extrapolates_the_steady_cost_per_env_step():
    """The fake's CPU is 2 s of setup + 0.01 s per env step. SB3 PPO's probes: 2,048 and
    4,096 steps, 22.48 and 42.96 s: 0.01 s per step (100 per CPU s); for 300k steps
    42.96 + 0.01 * (300,000 - 4,096) = 3,002 s."""
    job = Job("ppo", "Hopper-v5", "sb3", 0, 300_000)
    runner = FakeRunner()
    found = estimate(job, runner)
    assert [call.steps for call in runner.calls] == [2_048, 4_096]
    assert found == pytest.approx({"steps_per_cpu_s": 100.0, "cpu_s": 3_002.0})
    assert estimate(Job("ppo", "Hopper-v5", "sb3", 0, 4_096), runner) is None  # as short


def test_cached_measures_each_key_once(tmp_path: Path):
    measured: list[str] = []

    def measure(key: str) -> float:
        measured.append(key)
        return float(len(key))

    assert cached(tmp_path / "c.json", ["a", "bb"], measure) == {"a": 1.0, "bb": 2.0}
    assert cached(tmp_path / "c.json", ["bb", "ccc"], measure) == {"bb": 2.0, "ccc": 3.0}
    assert measured == ["a", "bb", "ccc"]


def test_tiny_real_suite_writes_results_and_a_table(tmp_path: Path, capsys):
    """CartPole-v1, ours and SB3, seed 0, 2,048 env steps, 2 evaluation episodes; then the
    same command again, which finds both runs done and trains nothing."""
    pytest.importorskip("stable_baselines3", reason="the bench extra installs stable-baselines3")
    argv = ["--envs", "CartPole-v1", "--seeds", "0", "--steps", "2048", "--eval-episodes", "2",
            "--results", str(tmp_path), "--json", str(tmp_path / "suite.json")]  # fmt: skip
    main(argv)
    for impl in ("ours", "sb3"):
        job = Job("ppo", "CartPole-v1", impl, 0, 2_048)
        result = load_result(tmp_path / job.filename, job)
        assert result is not None and result["env_steps"] >= 2_048 and result["cpu_s"] > 0
        assert 8 <= result["return"] <= 500  # a CartPole episode's return
    random = json.loads((tmp_path / "random.json").read_text())["CartPole-v1"]
    assert random == random_return("CartPole-v1")  # fixed seeds: the same episodes
    out = capsys.readouterr().out
    assert "| CartPole-v1 (2,048) |" in out
    assert "| classic control (1) |" in out
    # Its traits, measured once and cached: 4 observations, 2 choices, a pole that falls.
    assert "| CartPole-v1 | 4 | 2 discrete | early (terminated) | 1 ± 0 | - |" in out
    traits = json.loads((tmp_path / "traits.json").read_text())["CartPole-v1"]
    assert traits["terminates_early"] and traits["max_episode_steps"] == 500
    # The simulator's floor, timed once and cached: positive, and below each run's CPU.
    per_step = json.loads((tmp_path / "simulator.json").read_text())["CartPole-v1"]
    assert 0 < per_step * 2_048 < result["cpu_s"]
    assert "| CartPole-v1 | " in out and "| train CPU beyond the floor, ours / SB3 |" in out
    summary = json.loads((tmp_path / "suite.json").read_text())
    assert set(summary["tasks"][0]["returns"]) == {"ours", "sb3"}
    main(argv)
    assert "2 of 2 runs done earlier; 0 to run" in capsys.readouterr().out


def test_a_constant_mid_range_action_is_a_reference_only_for_continuous_actions():
    """Pendulum's mid-range torque (0) leaves the pole swinging about the bottom: each step
    costs its angle from upright squared (pi^2 at the bottom), so a 200-step episode returns
    far below a balanced pole's ~0. CartPole's actions are discrete: there is no "do
    nothing" to measure."""
    assert still_return("CartPole-v1") is None
    still = still_return("Pendulum-v1", episodes=3)
    assert -200 * math.pi**2 < still < -500
    assert still == still_return("Pendulum-v1", episodes=3)  # fixed seeds: the same episodes


def test_ant_pays_for_lying_still():
    """Ant-v5's healthy reward (1 a step while the torso stays in range) outlasts its costs
    when every torque is 0: ~990 over a 1,000-step episode, above what SB3's SAC reaches at
    100k env steps (~540): the suite prints it beside each task."""
    pytest.importorskip("mujoco", reason="the mujoco extra installs MuJoCo")
    assert 950 < still_return("Ant-v5", episodes=1) <= 1_000


def test_cpu_beyond_the_simulators_floor():
    # ours 60 s, SB3 100 s, the simulator 40 s of each: totals 0.6, beyond the floor 20 / 60
    assert beyond_floor(60.0, 100.0, 40.0) == pytest.approx(1 / 3)
    assert beyond_floor(40.0, 100.0, 0.0) == 0.4  # no floor: the ratio of totals
    assert math.isnan(beyond_floor(50.0, 30.0, 30.0))  # SB3 spent nothing beyond it


def test_the_simulators_cost_per_step_is_positive_and_orders_tasks_by_their_physics():
    """Hopper's MuJoCo step (5 substeps of a contact model) costs more CPU than CartPole's
    few lines of numpy."""
    pytest.importorskip("mujoco", reason="the mujoco extra installs MuJoCo")
    cartpole, hopper = simulator_cost("CartPole-v1", 500), simulator_cost("Hopper-v5", 500)
    assert 0 < cartpole < hopper < 0.01


def test_cached_keeps_what_another_process_wrote_meanwhile(tmp_path: Path):
    """Two suites sharing one results folder: neither's entries are lost to the other's write."""
    path = tmp_path / "c.json"

    def measure(key: str) -> float:
        write_json(path, read_json(path) | {f"other {key}": 0.5})  # the other process's write
        return float(len(key))

    write_json(path, {})
    assert cached(path, ["a", "bb"], measure) == {"a": 1.0, "bb": 2.0}
    assert read_json(path) == {"other a": 0.5, "a": 1.0, "other bb": 0.5, "bb": 2.0}
