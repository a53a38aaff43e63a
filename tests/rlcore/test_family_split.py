"""The MuJoCo family's PPO settings split by measured traits (a random policy's reward scale,
whether its episodes end early): the env decides, not a list of ids."""

import dataclasses

import pytest

from rlcore.family_split import (
    LARGE_REWARD_PER_STEP,
    LONG_HORIZON_GAE_LAMBDA,
    LONG_HORIZON_GAMMA,
    TINY_REWARD_PER_STEP,
    random_reward_per_step,
    random_traits,
    split_by_traits,
)
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


def test_a_task_earning_almost_nothing_until_its_time_limit_discounts_over_a_long_horizon():
    traits = random_traits("gymnasium:Swimmer-v5")
    assert traits is not None and not traits.terminates_early
    assert abs(traits.reward_mean) < TINY_REWARD_PER_STEP
    choice = choose_preset("auto", "gymnasium:Swimmer-v5", "ppo")
    assert choice.generic and f"gamma {LONG_HORIZON_GAMMA}" in choice.description
    assert f"GAE lambda {LONG_HORIZON_GAE_LAMBDA}" in choice.description
    assert choice.config.algo == dataclasses.replace(
        FAMILY.algo, gamma=LONG_HORIZON_GAMMA, gae_lambda=LONG_HORIZON_GAE_LAMBDA
    )
    assert choice.config.policy == FAMILY.policy and choice.config.trainer == FAMILY.trainer


@pytest.mark.parametrize(
    "env", ["gymnasium:Humanoid-v5", "gymnasium:Ant-v5", "gymnasium:Reacher-v5"]
)
def test_tasks_at_the_familys_reward_scale_keep_its_settings(env):
    reward = random_reward_per_step(env)
    assert reward is not None and TINY_REWARD_PER_STEP <= abs(reward) <= LARGE_REWARD_PER_STEP
    choice = choose_preset("auto", env, "ppo")
    assert choice.config is FAMILY and "normalised" not in choice.description


@pytest.mark.parametrize(
    ("env", "terminates_early"),
    [("gymnasium:Walker2d-v5", True), ("gymnasium:HalfCheetah-v5", False)],
)
def test_small_rewards_alone_do_not_lengthen_the_horizon(env, terminates_early):
    """Walker2d earns little per step but falls; HalfCheetah (its own preset aside) runs to
    its time limit but earns more: both keep the family's gamma."""
    traits = random_traits(env)
    assert traits is not None and traits.terminates_early is terminates_early
    assert split_by_traits(FAMILY, env) == (FAMILY, "")


def test_the_measurement_repeats_and_other_algorithms_are_untouched():
    random_traits.cache_clear()
    first = random_reward_per_step("gymnasium:HumanoidStandup-v5")
    random_traits.cache_clear()
    assert random_reward_per_step("gymnasium:HumanoidStandup-v5") == first  # seeded
    sac = choose_preset("auto", "gymnasium:HumanoidStandup-v5", "sac")
    assert sac.config is SAC_PRESETS["gym_locomotion"]


def test_an_env_that_cannot_be_built_keeps_the_family_settings():
    assert random_reward_per_step("mujoco:Walker2d") is None  # no such native task
    assert choose_preset("auto", "mujoco:Walker2d", "ppo").config is FAMILY
