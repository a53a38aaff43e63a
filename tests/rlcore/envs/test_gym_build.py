"""Building a bridged env from an id: frames where the env can render, and an error naming
the option when the env's constructor refuses one of ours."""

from typing import Any, ClassVar

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from rlcore.envs.gym_bridge import GymnasiumBridgeError, GymnasiumEnv


class Blind(gymnasium.Env):
    """An env whose constructor takes no render keyword; `fault` makes it fail as a bug."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fault: bool = False) -> None:
        if fault:
            raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


# Gymnasium warns that Blind is built with a render mode it does not list: the first try.
pytestmark = pytest.mark.filterwarnings("ignore:.*render_mode='rgb_array' that is not in")

BLIND = "rlcore-test/Blind-v0"
if BLIND not in gymnasium.registry:
    gymnasium.register(BLIND, entry_point=Blind, max_episode_steps=10)


def test_an_env_that_renders_no_way_tried_is_built_and_its_render_error_lists_each():
    env = GymnasiumEnv(BLIND, 2, render_size=40)  # built without a render mode
    env.reset(seed=0)
    with pytest.raises(GymnasiumBridgeError) as refused:
        env.render(size=8)
    env.close()
    assert str(refused.value) == (
        "gymnasium:rlcore-test/Blind-v0 does not render (render_mode rgb_array); built "
        "without it, as tried: render_mode='rgb_array', width=40, height=40: the constructor "
        "does not take 'render_mode'; render_mode='rgb_array': the constructor does not take "
        "'render_mode'"
    )


def test_a_keyword_of_env_kwargs_the_env_does_not_take_is_named():
    with pytest.raises(GymnasiumBridgeError) as refused:
        GymnasiumEnv("CartPole-v1", 2, env_kwargs={"pole_colour": "red"})
    message = str(refused.value)
    assert message.startswith(
        "env.options.env_kwargs: gymnasium:CartPole-v1 does not take 'pole_colour' ("
    )


def test_a_type_error_of_the_envs_own_is_raised_as_it_is():
    """Not taken for a render keyword the env lacks, nor for a user's wrong option."""
    with pytest.raises(TypeError, match="unsupported operand") as raised:
        GymnasiumEnv(BLIND, 2, env_kwargs={"fault": True})
    assert not isinstance(raised.value, GymnasiumBridgeError)
