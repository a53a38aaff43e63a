"""The suite's runs (benchmarks/suite/jobs.py): its tasks, budgets and schedule."""

from benchmarks.suite.jobs import CLASSIC, MUJOCO, default_steps, schedule, suite_envs


def test_the_suite_its_budgets_and_the_turns_of_its_schedule():
    assert len(MUJOCO) == 11 and "HumanoidStandup-v5" in MUJOCO
    assert suite_envs("ppo") == [*MUJOCO, *CLASSIC]
    assert suite_envs("sac") == [*MUJOCO, "MountainCarContinuous-v0", "Pendulum-v1"]
    assert suite_envs("sac", "mujoco") == [*MUJOCO]
    assert suite_envs("sac", "classic") == ["MountainCarContinuous-v0", "Pendulum-v1"]
    assert suite_envs("ppo", "classic") == [*CLASSIC]
    assert default_steps("ppo", "Hopper-v5") == 300_000
    assert default_steps("ppo", "Acrobot-v1") == 100_000
    assert default_steps("sac", "Hopper-v5") == 100_000
    jobs = schedule("ppo", ["CartPole-v1"], [0, 1], ["ours", "sb3"], None)
    assert [(j.seed, j.impl, j.steps) for j in jobs] == [
        (0, "ours", 100_000), (0, "sb3", 100_000), (1, "sb3", 100_000), (1, "ours", 100_000),
    ]  # fmt: skip
