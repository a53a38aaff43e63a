"""The MuJoCo family's PPO settings split by a measured trait, the reward scale of a random
policy: the env decides, not a list of ids."""

import dataclasses

import pytest

from rlcore.family_split import LARGE_REWARD_PER_STEP, random_reward_per_step
from rlcore.presets import PRESETS, SAC_PRESETS, choose_preset

FAMILY = PRESETS["gym_locomotion"]


def test_a_task_whose_random_policy_earns_far_more_per_step_normalises_its_rewards():
    reward = random_reward_per_step("gymnasium:HumanoidStandup-v5")
    assert reward is not None and reward > LARGE_REWARD_PER_STEP
    choice = choose_preset("auto", "gymnasium:HumanoidStandup-v5", "ppo")
    assert choice.generic and "rewards normalised" in choice.description
    algo = choice.config.algo
    assert algo.normalize_reward and algo.reward_scale == 1.0
    # Everything else is the family's.
    assert dataclasses.replace(algo, normalize_reward=False, reward_scale=0.1) == FAMILY.algo
    assert choice.config.policy == FAMILY.policy and choice.config.trainer == FAMILY.trainer


@pytest.mark.parametrize("env", ["gymnasium:Humanoid-v5", "gymnasium:Ant-v5"])
def test_tasks_at_the_familys_reward_scale_keep_its_settings(env):
    reward = random_reward_per_step(env)
    assert reward is not None and abs(reward) <= LARGE_REWARD_PER_STEP
    choice = choose_preset("auto", env, "ppo")
    assert choice.config is FAMILY and "normalised" not in choice.description


def test_the_measurement_repeats_and_other_algorithms_are_untouched():
    random_reward_per_step.cache_clear()
    first = random_reward_per_step("gymnasium:HumanoidStandup-v5")
    random_reward_per_step.cache_clear()
    assert random_reward_per_step("gymnasium:HumanoidStandup-v5") == first  # seeded
    sac = choose_preset("auto", "gymnasium:HumanoidStandup-v5", "sac")
    assert sac.config is SAC_PRESETS["gym_halfcheetah"]


def test_an_env_that_cannot_be_built_keeps_the_family_settings():
    assert random_reward_per_step("mujoco:Walker2d") is None  # no such native task
    assert choose_preset("auto", "mujoco:Walker2d", "ppo").config is FAMILY
