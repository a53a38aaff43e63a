"""Tiny Gymnasium envs for the bridge tests, registered under `rlcore-test/`."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


class DictPoint(gymnasium.Env):
    """A point pushed by a 2-D force; Dict observation {"velocity": [2], "position": [2, 1]}."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-10, 10, (2, 1), np.float32),
                "velocity": spaces.Box(-np.inf, np.inf, (2,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.render_mode = render_mode

    def _obs(self) -> dict[str, np.ndarray]:
        return {"position": self.pos.reshape(2, 1).copy(), "velocity": self.vel.copy()}

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.vel = np.zeros(2, np.float32)
        return self._obs(), {}

    def step(self, action):
        self.vel = (self.vel + 0.1 * np.asarray(action, np.float32)).astype(np.float32)
        self.pos = (self.pos + 0.1 * self.vel).astype(np.float32)
        out = bool(np.abs(self.pos).max() > 2)
        return self._obs(), float(-np.square(self.pos).sum()), out, False, {}

    def render(self):
        frame = np.zeros((16, 16, 3), np.uint8)
        row, col = (np.clip((self.pos + 2) * 4, 0, 15)).astype(int)
        frame[row, col] = 255
        return frame


class Counter(gymnasium.Env):
    """obs = [steps taken]; reward 1; never terminates. With a time limit of L, the final
    observation of a truncated episode is [L] while the next episode starts at [0]."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    observation_space = spaces.Box(0, np.inf, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([float(self.t)], np.float32), 1.0, False, False, {}


class CounterVectorEnv(VectorEnv):
    """Counter, numpy-vectorised with next-step auto-reset and no chosen-instance resets
    (like Gymnasium's CartPoleVectorEnv): the step after a done resets, ignoring the action."""

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, max_episode_steps: int = 3, **_: Any) -> None:
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.single_observation_space = Counter.observation_space
        self.single_action_space = Counter.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.t = np.zeros(num_envs, np.int64)
        self.prev_done = np.zeros(num_envs, bool)

    def reset(self, *, seed: int | None = None, options: Any = None):
        self.t[:] = 0
        self.prev_done[:] = False
        return self.t[:, None].astype(np.float32), {}

    def step(self, actions):
        self.t += 1
        reward = np.ones(self.num_envs, np.float32)
        truncated = self.t >= self.max_episode_steps
        self.t[self.prev_done] = 0
        reward[self.prev_done] = 0.0
        truncated[self.prev_done] = False
        self.prev_done = truncated.copy()
        return (self.t[:, None].astype(np.float32), reward, np.zeros(self.num_envs, bool),
                truncated, {})  # fmt: skip


class TupleObs(gymnasium.Env):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    observation_space = spaces.Tuple((spaces.Text(5), spaces.Discrete(3)))
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None):
        return ("a", 0), {}

    def step(self, action):
        return ("a", 0), 0.0, False, False, {}


def register() -> None:
    """Register the test envs once (Counter and DictPoint get time limits)."""
    if "rlcore-test/DictPoint-v0" in gymnasium.registry:
        return
    gymnasium.register("rlcore-test/DictPoint-v0", entry_point=DictPoint, max_episode_steps=50)
    gymnasium.register(
        "rlcore-test/Counter-v0",
        entry_point=Counter,
        max_episode_steps=3,
        vector_entry_point=CounterVectorEnv,
    )
    gymnasium.register("rlcore-test/TupleObs-v0", entry_point=TupleObs, max_episode_steps=5)
