"""Task families and the preset an experiment's unset keys come from."""

import pytest

from rlcore.presets import (
    CONTINUOUS_CLASSIC,
    DISCRETE_CLASSIC,
    MANIPULATION,
    MUJOCO_LOCOMOTION,
    PRESETS,
    SAC_PRESETS,
    choose_preset,
    env_family,
)


@pytest.mark.parametrize(
    ("env_name", "family"),
    [
        ("cartpole", DISCRETE_CLASSIC),
        ("gymnasium:Acrobot-v1", DISCRETE_CLASSIC),
        ("gymnasium:MountainCarContinuous-v0", CONTINUOUS_CLASSIC),
        ("pendulum", CONTINUOUS_CLASSIC),
        ("mujoco:Ant", MUJOCO_LOCOMOTION),
        ("gymnasium:Walker2d-v5", MUJOCO_LOCOMOTION),
        ("gymnasium:my_pkg.envs:Hopper-v5", MUJOCO_LOCOMOTION),  # a module prefix is skipped
        ("push_cube", MANIPULATION),
        ("gymnasium:FrozenLake-v1", None),
    ],
)
def test_families_are_told_by_name(env_name, family):
    assert env_family(env_name) == family


def test_auto_prefers_the_envs_own_preset_then_its_family_then_the_library():
    own = choose_preset("auto", "mujoco:HalfCheetah", "sac")
    assert own.config is SAC_PRESETS["mujoco_halfcheetah"] and not own.generic
    family = choose_preset("auto", "mujoco:Hopper", "ppo")
    assert family.config is PRESETS["gym_halfcheetah"] and family.generic
    assert "MuJoCo locomotion" in family.description
    library = choose_preset("auto", "cartpole", "sac")  # no SAC for discrete actions
    assert library.config is None and "no sac defaults" in library.description


def test_named_presets_are_looked_up_per_algorithm():
    assert choose_preset("pendulum", "cartpole", "sac").config is SAC_PRESETS["pendulum"]
    assert choose_preset("none", "push_cube", "ppo").config is None
    with pytest.raises(ValueError, match="unknown preset 'gym_cartpole' for sac"):
        choose_preset("gym_cartpole", "cartpole", "sac")
