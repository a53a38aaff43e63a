"""Frames of bridged envs: a renderer that cannot work here fails with one error saying
why; any other error of a renderer is raised as it is."""

from typing import Any, ClassVar

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv

from rlcore.envs.gym_bridge import GymnasiumBridgeError, GymnasiumEnv


class Unrenderable(gymnasium.Env):
    """An env whose renderer raises `error` when it draws."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, error: Exception) -> None:
        self.render_mode = "rgb_array"
        self.error = error

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def render(self):
        raise self.error


def bridged(error: Exception) -> GymnasiumEnv:
    vector = SyncVectorEnv([lambda: Unrenderable(error)] * 2)
    return GymnasiumEnv(vector_env=vector, max_episode_steps=10)


@pytest.mark.parametrize("env_ids", [None, torch.tensor([1])], ids=["all", "some"])
def test_a_renderer_that_cannot_work_here_fails_with_one_error_naming_why(env_ids):
    unavailable = RuntimeError("No OpenGL backend could be imported.")
    env = bridged(unavailable)
    env.reset(seed=0)
    with pytest.raises(GymnasiumBridgeError) as refused:
        env.render(env_ids, size=8)
    env.close()
    assert str(refused.value) == (
        "gymnasium:SyncVectorEnv cannot render: RuntimeError: No OpenGL backend could be imported."
    )
    assert refused.value.__cause__ is unavailable


def test_any_other_error_of_a_renderer_is_raised_as_it_is():
    fault = ZeroDivisionError("a fault in the env's own drawing")
    env = bridged(fault)
    env.reset(seed=0)
    with pytest.raises(ZeroDivisionError) as raised:
        env.render(size=8)
    env.close()
    assert raised.value is fault
