"""Tiny Gymnasium envs for the bridge tests, registered under `rlcore-test/`."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import AddRenderObservation


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


class PixelPoint(gymnasium.Env):
    """A point pushed by a 2-D force, seen as {"image": uint8 [16, 16, 3] channel-last,
    "state": float32 [2]}. The image is noise from the env's generator (so every instance's
    differs at every step); each step terminates with probability 0.2."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (16, 16, 3), np.uint8),
                "state": spaces.Box(-np.inf, np.inf, (2,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.render_mode = render_mode

    def _obs(self) -> dict[str, np.ndarray]:
        self.image = self.np_random.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        return {"image": self.image, "state": self.pos.copy()}

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        self.pos = (self.pos + 0.1 * np.asarray(action, np.float32)).astype(np.float32)
        terminated = bool(self.np_random.random() < 0.2)
        return self._obs(), float(-np.square(self.pos).sum()), terminated, False, {}

    def render(self):
        return self.image


def dict_point_pixels(**_: Any) -> gymnasium.Env:
    """DictPoint with its rendered frame added, as a user would: {"pixels": uint8
    [16, 16, 3], "position": [2, 1], "velocity": [2]}."""
    return AddRenderObservation(DictPoint(render_mode="rgb_array"), render_only=False)


class AnySpace(gymnasium.Env):
    """Observations sampled from any given space (for the bridge's space handling)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}
    action_space = spaces.Discrete(2)

    def __init__(self, observation_space: spaces.Space, render_mode: str | None = None) -> None:
        self.observation_space = observation_space
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


class Recorder(gymnasium.Wrapper):
    """Keeps the last observation its env returned (from `reset` or `step`) and the last
    that `step` returned: what a vector env of these saw, instance by instance."""

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.last = obs
        return obs, info

    def step(self, action):
        obs, *rest = self.env.step(action)
        self.last = self.last_step = obs
        return obs, *rest


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


class FramesVectorEnv(VectorEnv):
    """A counter seen in frames, numpy-vectorised with same-step auto-reset: {"frame": uint8
    [8, 8, 3] channel-last (`frame(i, t)`), "count": [t]}, truncated at `max_episode_steps`.
    Its `info["final_obs"]` is a dict of per-key arrays (the form a vector env may give
    instead of SyncVectorEnv's object array of observations)."""

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int = 1, max_episode_steps: int = 3) -> None:
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.single_observation_space = spaces.Dict(
            {
                "frame": spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "count": spaces.Box(0, np.inf, (1,), np.float32),
            },
            sort_keys=False,
        )
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.t = np.zeros(num_envs, np.int64)

    @staticmethod
    def frame(i: int, t: int) -> np.ndarray:
        """Instance i's frame at step t: no two pixels or channels alike (0 <= t, i < 3)."""
        h, w, c = np.indices((8, 8, 3))
        return (h + 8 * w + 64 * c + 3 * t + 9 * i).astype(np.uint8)

    def _obs(self) -> dict[str, np.ndarray]:
        frames = np.stack([self.frame(i, int(t)) for i, t in enumerate(self.t)])
        return {"frame": frames, "count": self.t[:, None].astype(np.float32)}

    def reset(self, *, seed: int | None = None, options: Any = None):
        self.t[:] = 0
        return self._obs(), {}

    def step(self, actions):
        self.t += 1
        truncated = self.t >= self.max_episode_steps
        info = {}
        if truncated.any():
            info = {"final_obs": self._obs(), "_final_obs": truncated.copy()}
            self.t[truncated] = 0
        reward = np.ones(self.num_envs, np.float32)
        return self._obs(), reward, np.zeros(self.num_envs, bool), truncated, info


class TupleObs(gymnasium.Env):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    observation_space = spaces.Tuple((spaces.Text(5), spaces.Discrete(3)))
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None):
        return ("a", 0), {}

    def step(self, action):
        return ("a", 0), 0.0, False, False, {}


def register() -> None:
    """Register the test envs once (each with a time limit)."""
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
    gymnasium.register("rlcore-test/PixelPoint-v0", entry_point=PixelPoint, max_episode_steps=5)
    gymnasium.register(
        "rlcore-test/DictPointPixels-v0", entry_point=dict_point_pixels, max_episode_steps=5
    )
    gymnasium.register("rlcore-test/AnySpace-v0", entry_point=AnySpace, max_episode_steps=5)
