"""`benchmarks.env_defaults`: what only `env.name` trains, and probes of one key changed."""

import time

import pytest

from benchmarks.env_defaults import (
    cpu_to_match,
    evaluation_cpu,
    experiment,
    learner_cpu_ratio,
    mean_or_none,
    params_for,
    parse_settings,
    reaches,
    run_ours,
    run_sb3,
    step_cpu,
)
from rlcore.family_split import LONG_HORIZON_GAMMA
from rlcore.presets import PRESETS


def test_a_probe_changes_one_key_of_what_env_name_alone_gives():
    alone = experiment("Swimmer-v5", 4096)
    assert alone.algo.gamma == LONG_HORIZON_GAMMA  # the family's split, read from the env
    probe = experiment("Swimmer-v5", 4096, settings=parse_settings(["algorithm.ppo.gamma=0.995"]))
    assert probe.algo.gamma == 0.995
    assert probe.algo.lr == alone.algo.lr and probe.policy == alone.policy


def test_a_probe_can_name_the_familys_preset_on_a_task_with_its_own():
    own = experiment("HalfCheetah-v5", 4096)
    family = experiment("HalfCheetah-v5", 4096, settings={"preset": "gym_locomotion"})
    assert family.env.name == own.env.name == "gymnasium:HalfCheetah-v5"
    assert family.algo == PRESETS["gym_locomotion"].algo != own.algo


def test_a_probe_can_run_ours_compiled_where_the_default_is_eager():
    """SAC trains eager by default (`runtime.compile: auto`); the probe's
    `runtime.compile=true` trains the same experiment compiled."""
    default = params_for("HumanoidStandup-v5", 100_000, "sac")
    compiled = params_for("HumanoidStandup-v5", 100_000, "sac", {"runtime.compile": True})
    assert default.runtime.compiles(default.experiment(seed=0))[0] is False
    assert compiled.runtime.compiles(compiled.experiment(seed=0))[0] is True
    assert compiled.experiment(seed=0) == default.experiment(seed=0)


@pytest.mark.parametrize("item", ["gamma", "=0.99"])
def test_a_setting_without_key_and_value_is_one_line(item):
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        parse_settings([item])


class SleepyTrainer:
    """An evaluation that waits 0.2 s without computing: as a busy core makes a run wait."""

    def __init__(self) -> None:
        self.evaluations = 0

    def _evaluate(self) -> bool:
        self.evaluations += 1
        time.sleep(0.2)
        return False


def test_evaluation_time_counts_cpu_not_the_wait():
    """Training CPU = the process's minus evaluation's: the wall time an evaluation waits
    (0.4 s here) is no CPU time and must not be subtracted."""
    trainer = SleepyTrainer()
    spent = evaluation_cpu(trainer)
    assert trainer._evaluate() is False and trainer._evaluate() is False
    assert trainer.evaluations == 2
    assert spent[1] >= 0.4 and spent[0] < 0.1


def test_an_sb3_run_reports_its_steps_and_leaves_no_log_folder(tmp_path, monkeypatch):
    """SB3's own logger makes an empty `SB3-<date>` folder in the temp dir per run (181 of
    them after one suite); the benchmark's writes nothing."""
    pytest.importorskip("stable_baselines3", reason="the bench extra installs stable-baselines3")
    import tempfile

    from benchmarks.env_defaults import run_sb3

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = run_sb3("Pendulum-v1", seed=0, steps=200, algorithm="sac", eval_episodes=1)
    assert result["impl"] == "sb3" and result["env_steps"] == 200
    assert -2_000 < result["return"] <= 0  # Pendulum's rewards are never positive
    assert list(tmp_path.iterdir()) == []


def test_the_command_probes_sac_against_sacs_defaults(monkeypatch, capsys):
    """`--algorithm sac` reaches both sides: ours' experiment and SB3's model class."""
    import benchmarks.env_defaults as env_defaults

    calls = []

    def fake(impl):
        def run(env_id, seed, steps, *args, algorithm, settings=None, **kwargs):
            calls.append((impl, algorithm, settings))
            return env_defaults.row(impl, env_id, seed, steps, -150.0, 1.0, 1.0)

        return run

    monkeypatch.setattr(env_defaults, "run_ours", fake("ours"))
    monkeypatch.setattr(env_defaults, "run_sb3", fake("sb3"))
    env_defaults.main(["--algorithm", "sac", "--envs", "Pendulum-v1", "--seeds", "0",
                       "--set", "replay.batch_size=64"])  # fmt: skip
    assert calls == [("ours", "sac", {"replay.batch_size": 64}), ("sb3", "sac", None)]
    assert "SB3 SAC defaults" in capsys.readouterr().out


def test_a_trace_holds_a_runs_training_statistics_about_every_thousand_steps(tmp_path):
    """`--trace DIR`: where two runs of one seed part (eager against compiled, say), and in
    which statistic: a CSV per run, one row about every 1,000 env steps."""
    import csv
    import itertools

    from benchmarks.env_defaults import TRACE_EVERY, run_ours, trace_path

    path = trace_path(tmp_path / "traces", "gymnasium:Pendulum-v1", 0)
    assert path == tmp_path / "traces" / "gymnasium_Pendulum-v1-seed0.csv"
    settings = {"runtime.compile": False, "replay.warmup_steps": 500}
    result = run_ours("Pendulum-v1", 0, 3_000, algorithm="sac", eval_episodes=1,
                      settings=settings, trace=path)  # fmt: skip
    with path.open() as f:
        rows = list(csv.DictReader(f))
    steps = [int(float(r["env_steps"])) for r in rows]
    assert steps[0] <= TRACE_EVERY and steps[-1] == result["env_steps"]  # the last ones too
    assert all(b - a >= TRACE_EVERY for a, b in itertools.pairwise(steps[:-1]))
    # A row holds the means over its window's iterations, not its last iteration's values.
    per_iteration = steps[0] / float(rows[0]["train/iteration"])
    assert float(rows[1]["train/iteration"]) < steps[1] / per_iteration - 1
    learning = [r for r in rows if r.get("stats/alpha")]
    assert learning, rows[0].keys()  # past the warm-up: the temperature is being learned
    assert all(0 < float(r["stats/alpha"]) <= 1.0 for r in learning)
    assert all(float(r["stats/q_mean"]) < 0 for r in learning[1:])  # Pendulum: costs only


def test_the_one_function_eager_path_runs_the_compiled_paths_update_uncompiled():
    """`--sac-path one-function-eager`: `SAC._one_eager` (torch.func gradients, DeviceAdam)
    called as it is, no graph compiled, and a run through it records its path."""
    import torch._dynamo.utils

    from benchmarks.env_defaults import one_function_eager_trainer, run_ours
    from rlcore.algos.sac import SAC

    cfg = experiment("Pendulum-v1", 2_000, "sac")
    trainer = one_function_eager_trainer(cfg)
    assert trainer.algo._one_function and trainer.algo._one.__func__ is SAC._one_eager
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    settings = {"replay.warmup_steps": 500}
    result = run_ours("Pendulum-v1", 0, 1_000, algorithm="sac", eval_episodes=1,
                      settings=settings, sac_path="one-function-eager")  # fmt: skip
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    assert result["sac_path"] == "one-function-eager" and result["compiled"] is False
    assert result["env_steps"] >= 960 and -2_000 < result["return"] <= 0  # whole iterations


class BusyEnv:
    """A vector env whose step burns CPU (as a simulator does) and returns its argument."""

    def step(self, action):
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass
        return action


def test_step_cpu_sums_the_cpu_inside_the_env_step_and_passes_results_through():
    env = BusyEnv()
    spent = step_cpu(env, "step")
    assert env.step(7) == 7 and env.step("a") == "a"
    assert 0.1 <= spent[0] < 0.2  # two steps of 0.05 CPU s each, nothing outside them


def test_learner_cpu_is_train_cpu_beyond_the_env_steps():
    ours = {"cpu_s": 100.0, "env_cpu_s": 60.0}
    sb3 = {"cpu_s": 200.0, "env_cpu_s": 70.0}
    assert "40.0 s / SB3 130.0 s = 0.308" in learner_cpu_ratio(ours, sb3)
    assert learner_cpu_ratio({"cpu_s": 100.0, "env_cpu_s": None}, sb3) == ""  # a native env
    assert mean_or_none([1.0, 3.0]) == 2.0 and mean_or_none([1.0, None]) is None


def test_both_learners_report_their_env_steps_cpu_on_a_real_gymnasium_env():
    pytest.importorskip("stable_baselines3")
    ours = run_ours("CartPole-v1", 0, 4096, eval_episodes=1)
    sb3 = run_sb3("CartPole-v1", 0, 2048, eval_episodes=1)
    for run in (ours, sb3):
        assert 0 < run["env_cpu_s"] < run["cpu_s"]


def test_return_matched_first_and_for_good():
    """A spike (seed 0's 107 at 20 steps) is where ours first reaches SB3's mean; from 60
    steps on every evaluation stays at or above it; seed 1 reaches it only at its last."""
    spiky = [[20, 107.0, 2.0], [40, 67.0, 4.0], [60, 80.0, 6.0], [80, 95.0, 8.0]]
    late = [[20, 10.0, 1.0], [40, 79.0, 2.0], [60, 81.0, 3.0]]
    assert reaches(spiky, 80.0) == ([20, 107.0, 2.0], [60, 80.0, 6.0])
    assert reaches(spiky, 100.0) == ([20, 107.0, 2.0], None)
    ours = [{"seed": 0, "curve": spiky}, {"seed": 1, "curve": late}]
    sb3 = {"env": "Task", "return": 80.0, "cpu_s": 10.0, "env_steps": 100}
    first, stays = cpu_to_match(ours, sb3).splitlines()
    assert "first reaches" in first and "from 20/60 env steps, mean CPU 2.5 s: 0.250x" in first
    assert "stays at or above" in stays and "from 60/60 env steps, mean CPU 4.5 s: 0.450x" in stays
    never = cpu_to_match(ours, sb3 | {"return": 100.0}).splitlines()
    assert never == [
        "Task: on seeds [1] ours never reaches SB3's mean return 100.0",
        "Task: on seeds [0, 1] ours ends below SB3's mean return 100.0",
    ]
