"""A family's settings split by what an env is like (`rlcore.envs.traits`), never by its id.

The MuJoCo family's PPO settings scale rewards by a fixed factor chosen on tasks whose
random policy earns about one per step or less. A task that earns far more (HumanoidStandup:
tens per step) leaves the value targets far outside that range, and the fixed scale trains
it worse than SB3's defaults; normalising rewards by the running scale of the return
(`normalize_reward`) recovers it (benchmarks/README.md, *suite*). The reward scale is read
from a short random rollout of the env itself.
"""

from __future__ import annotations

import dataclasses
import functools

from rlcore.config import EnvConfig, ExperimentConfig
from rlcore.errors import ConfigError, MissingExtraError

LARGE_REWARD_PER_STEP = 20.0
"""A random policy's mean reward per step (in magnitude) above which rewards are normalised:
far above the family's tuned tasks (below 1), and Humanoid's and InvertedDoublePendulum's
(5 to 8), which train well with the fixed scale."""

PROBE_ENVS, PROBE_STEPS = 4, 100


@functools.lru_cache(maxsize=64)
def random_reward_per_step(env_name: str) -> float | None:
    """The mean per-step reward of uniform random actions on `env_name` (seeded, so the same
    env gives the same figure), or None where the env cannot be built here (the experiment's
    own build reports why)."""
    from rlcore.envs import make_env
    from rlcore.envs.traits import measure_traits

    try:
        env = make_env(EnvConfig(env_name, num_envs=PROBE_ENVS))
    except (ValueError, ConfigError, MissingExtraError):  # an unknown task, a missing extra
        return None
    try:
        return measure_traits(env, steps=PROBE_STEPS).reward_mean
    finally:
        env.close()


def normalise_large_rewards(cfg: ExperimentConfig, env_name: str) -> tuple[ExperimentConfig, str]:
    """`cfg` (a family's PPO settings) with rewards normalised where `env_name`'s random
    policy earns more than `LARGE_REWARD_PER_STEP` per step, and the reason in words ("" and
    `cfg` itself elsewhere)."""
    reward = random_reward_per_step(env_name)
    if reward is None or abs(reward) <= LARGE_REWARD_PER_STEP:
        return cfg, ""
    algo = dataclasses.replace(cfg.algo, normalize_reward=True, reward_scale=1.0)
    why = f"; rewards normalised: a random policy earns {reward:.3g} per step here"
    return dataclasses.replace(cfg, algo=algo), why
