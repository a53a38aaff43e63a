"""A family's settings split by what an env is like (`rlcore.envs.traits`), never by its id.

The MuJoCo family's PPO settings were chosen on tasks whose random policy earns about one
per step or less, in magnitude, and whose walkers fall. Two kinds of task fall outside:

- A task that earns far more (HumanoidStandup: tens per step) leaves the value targets far
  outside that range: the fixed reward scale trains it worse than SB3's defaults, and
  normalising rewards by the running scale of the return (`normalize_reward`) recovers it.
- A task whose random policy earns almost nothing per step and whose episodes end only at
  the time limit (Swimmer: ~0.02) pays for progress summed over the whole episode, with no
  fall to avoid: the family's 200-step horizon (gamma 0.995) settles on a slow gait, and a
  10,000-step one (0.9999, RL Zoo's tuned Swimmer's) finds faster ones. Its advantages then
  look further ahead as well (GAE lambda 0.98, where the family's 0.946 weighs mostly the
  next ~20 steps against a critic that must value 10,000): with the long horizon alone
  most seeds still keep a slow gait; with both, nearly every seed finds the fast one.

Both are read from a short random rollout of the env itself (benchmarks/README.md, *suite*).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from rlcore.config import EnvConfig, ExperimentConfig
from rlcore.errors import ConfigError, MissingExtraError

if TYPE_CHECKING:
    from rlcore.envs.traits import EnvTraits

LARGE_REWARD_PER_STEP = 20.0
"""A random policy's mean reward per step (in magnitude) above which rewards are normalised:
far above the family's tuned tasks (below 1), and Humanoid's and InvertedDoublePendulum's
(5 to 8), which train well with the fixed scale."""

TINY_REWARD_PER_STEP = 0.05
"""A random policy's mean reward per step (in magnitude) below which a task whose episodes
end only at the time limit discounts over a long horizon: Swimmer earns ~0.02, the family's
other tasks 0.09 (Walker2d, which falls) to 32 (HumanoidStandup), HalfCheetah 0.13."""

LONG_HORIZON_GAMMA = 0.9999
LONG_HORIZON_GAE_LAMBDA = 0.98
"""GAE's lambda with `LONG_HORIZON_GAMMA`: Swimmer-v5 at 300k env steps returned 262-350 on
every seed of 0-2 with 0.97, 0.98 or 0.99, against 31-103 with the family's 0.946
(benchmarks/README.md, *suite*)."""

PROBE_ENVS, PROBE_STEPS = 4, 100


@functools.lru_cache(maxsize=64)
def random_traits(env_name: str) -> EnvTraits | None:
    """`env_name`'s traits under uniform random actions (seeded, so the same env gives the
    same figures), or None where the env cannot be built here (the experiment's own build
    reports why)."""
    from rlcore.envs import make_env
    from rlcore.envs.traits import measure_traits

    try:
        env = make_env(EnvConfig(env_name, num_envs=PROBE_ENVS))
    except (ValueError, ConfigError, MissingExtraError):  # an unknown task, a missing extra
        return None
    try:
        return measure_traits(env, steps=PROBE_STEPS)
    finally:
        env.close()


def random_reward_per_step(env_name: str) -> float | None:
    """The mean per-step reward of uniform random actions on `env_name`, or None where the
    env cannot be built here."""
    traits = random_traits(env_name)
    return None if traits is None else traits.reward_mean


def split_by_traits(cfg: ExperimentConfig, env_name: str) -> tuple[ExperimentConfig, str]:
    """`cfg` (a family's PPO settings) as `env_name`'s traits call for it: rewards normalised
    where its random policy earns more than `LARGE_REWARD_PER_STEP` per step, long horizons
    where it earns less than `TINY_REWARD_PER_STEP` and episodes end only at the time limit;
    with the reason in words ("" and `cfg` itself elsewhere)."""
    traits = random_traits(env_name)
    if traits is None:
        return cfg, ""
    reward = traits.reward_mean
    if abs(reward) > LARGE_REWARD_PER_STEP:
        algo = dataclasses.replace(cfg.algo, normalize_reward=True, reward_scale=1.0)
        why = f"; rewards normalised: a random policy earns {reward:.3g} per step here"
    elif abs(reward) < TINY_REWARD_PER_STEP and not traits.terminates_early:
        algo = dataclasses.replace(
            cfg.algo, gamma=LONG_HORIZON_GAMMA, gae_lambda=LONG_HORIZON_GAE_LAMBDA
        )
        why = (
            f"; gamma {LONG_HORIZON_GAMMA}, GAE lambda {LONG_HORIZON_GAE_LAMBDA}: a random "
            f"policy earns {reward:.2g} per step here and episodes end only at the time limit"
        )
    else:
        return cfg, ""
    return dataclasses.replace(cfg, algo=algo), why
