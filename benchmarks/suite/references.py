"""What each task is scored and costed against, measured once per task and cached: the
random policy's return, a constant action's, the simulator's own CPU per step, the env's
traits."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.env_defaults import env_name
from benchmarks.suite.jobs import read_json
from pipelines.files import write_json
from rlcore.config import EnvConfig
from rlcore.envs import make_env
from rlcore.envs.traits import measure_traits

RANDOM_EPISODES = 10
TRAIT_ENVS = 4  # env instances of the traits' random rollout
SIMULATOR_STEPS = 5_000  # random steps that time a task's own simulation


def _episode_return(env: Any, seed: int, next_action: Callable[[], Any]) -> float:
    """The return of one episode from `env.reset(seed=seed)`, acting `next_action()`."""
    env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(next_action())
        total, done = total + float(reward), terminated or truncated
    return total


def random_return(env_id: str, episodes: int = RANDOM_EPISODES) -> float:
    """Mean return of uniform random actions over `episodes` episodes, seeds 0, 1, ..."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    try:
        for seed in range(episodes):
            env.action_space.seed(seed)
            returns.append(_episode_return(env, seed, env.action_space.sample))
    finally:
        env.close()
    return statistics.fmean(returns)


def still_return(env_id: str, episodes: int = RANDOM_EPISODES) -> float | None:
    """Mean return of one constant action, the middle of the action box (0 for MuJoCo's
    symmetric torques: the body goes limp), over `episodes` episodes, seeds 0, 1, ...; None
    for a discrete action space, where no action means "do nothing". A score can look like
    learning where this alone beats the reference: Ant-v5 pays ~1 per step for staying
    upright, so lying still returns ~990 over 1,000 steps."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        space = env.action_space
        if not isinstance(space, gym.spaces.Box):
            return None
        bounded = np.isfinite(space.low) & np.isfinite(space.high)
        middle = np.where(bounded, (space.low + space.high) / 2, 0.0).astype(space.dtype)
        returns = [_episode_return(env, seed, lambda: middle) for seed in range(episodes)]
        return statistics.fmean(returns)
    finally:
        env.close()


def simulator_cost(env_id: str, steps: int = SIMULATOR_STEPS) -> float:
    """CPU seconds per env step of the task's own simulation (one Gymnasium env, actions
    drawn uniformly beforehand, reset where an episode ends): a floor that every
    implementation pays per env step, whatever it learns and however fast."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(steps)]
        start = time.process_time()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return (time.process_time() - start) / steps
    finally:
        env.close()


def cached(path: Path, keys: Sequence[str], measure: Callable[[str], Any]) -> dict[str, Any]:
    """`measure(key)` for each of `keys`, kept in the JSON file `path` across runs. Each
    write merges what the file holds by then: processes sharing `--results` (one per core,
    each with its own `--envs`) keep each other's entries."""
    found = _json_dict(path)
    missing = [key for key in keys if key not in found]
    for key in missing:
        value = measure(key)
        found = _json_dict(path) | found | {key: value}
        write_json(path, found)
    return {key: found[key] for key in keys}


def _json_dict(path: Path) -> dict[str, Any]:
    found = read_json(path)
    return found if isinstance(found, dict) else {}


def env_traits(env_id: str) -> dict[str, Any]:
    """The task's traits (`rlcore.envs.traits`) as JSON: what a family split may read."""
    env = make_env(EnvConfig(env_name(env_id), num_envs=TRAIT_ENVS))
    try:
        return dataclasses.asdict(measure_traits(env))
    finally:
        env.close()
