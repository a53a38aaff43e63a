"""Env traits from a short random rollout: what a family split may read (issue P17)."""

import pytest
import torch

from rlcore.config import EnvConfig
from rlcore.envs import make_env
from rlcore.envs.traits import measure_traits


def traits_of(name: str, steps: int = 300, num_envs: int = 4, seed: int = 0):
    env = make_env(EnvConfig(name, num_envs=num_envs))
    try:
        return measure_traits(env, steps=steps, seed=seed)
    finally:
        env.close()


def test_cartpole_terminates_early_and_pays_one_per_step() -> None:
    traits = traits_of("cartpole")
    assert (traits.obs_size, traits.action_size, traits.discrete) == (4, 2, True)
    assert traits.terminates_early  # a random cart drops its pole within ~20 steps
    assert traits.reward_mean == 1.0 and traits.reward_std == 0.0
    assert traits.max_episode_steps == 500


def test_pendulum_never_terminates_and_its_reward_scale_is_measured() -> None:
    traits = traits_of("pendulum")
    assert (traits.obs_size, traits.action_size, traits.discrete) == (3, 1, False)
    assert not traits.terminates_early
    # Pendulum's cost is at most pi^2 + 0.1 * 8^2 + 0.001 * 2^2 ~ 16.3 per step.
    assert -16.3 < traits.reward_mean < 0 and traits.reward_std > 0


def test_the_same_seed_measures_the_same_traits() -> None:
    assert traits_of("pendulum", seed=3) == traits_of("pendulum", seed=3)


@pytest.mark.parametrize(
    "env_id, terminates, sizes",
    [("Hopper-v5", True, (11, 3)), ("Swimmer-v5", False, (8, 2))],
)
def test_gymnasium_mujoco_walkers_fall_and_swimmers_do_not(env_id, terminates, sizes) -> None:
    pytest.importorskip("mujoco")
    traits = traits_of(f"gymnasium:{env_id}", steps=300, num_envs=2)
    assert (traits.obs_size, traits.action_size) == sizes
    assert traits.terminates_early is terminates
    assert torch.isfinite(torch.tensor(traits.reward_std))
