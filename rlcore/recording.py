"""Record an acting policy's transitions into a replay buffer (offline datasets)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlcore.collector import SyncCollector
from rlcore.envs.base import BatchedEnv
from rlcore.episodes import EpisodeStats
from rlcore.policies import Actor
from rlcore.replay import ReplayBuffer
from rlcore.rollout import RolloutSpec, make_rollout

CHUNK_STEPS = 64  # steps per env per collector call


def recorded_steps(env_steps: int, num_envs: int) -> int:
    """The env steps `record_transitions` takes for `env_steps`: whole collector calls of
    `num_envs` envs x `CHUNK_STEPS` steps, at least one."""
    per_call = num_envs * CHUNK_STEPS
    return max(-(-env_steps // per_call), 1) * per_call


def record_transitions(
    env: BatchedEnv,
    policy: Actor,
    env_steps: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[ReplayBuffer, EpisodeStats]:
    """Step `env` with `policy`'s sampled actions for `env_steps` steps (rounded up to whole
    collector calls) and keep every transition, with time-limit ends' true final
    observations; return the buffer and the episodes that finished.

    `progress(done_steps, total_steps)` is called after every chunk.
    """
    per_call = env.num_envs * CHUNK_STEPS
    calls = recorded_steps(env_steps, env.num_envs) // per_call
    generator = torch.Generator(device=env.device).manual_seed(seed)
    spec = RolloutSpec.for_env(env, CHUNK_STEPS, with_value=policy.has_critic, with_final_obs=True)
    rollout = make_rollout(spec)
    collector = SyncCollector(env, policy, rollout, generator)
    collector.reset(seed=seed)
    buffer = ReplayBuffer.for_env(env, calls * per_call, generator)
    finished: list[EpisodeStats] = []
    for call in range(calls):
        finished.append(collector.collect().resolve())  # before the rollout is refilled
        buffer.add_rollout(rollout)
        if progress is not None:
            progress((call + 1) * per_call, calls * per_call)
    return buffer, _concatenate(finished)


def _concatenate(parts: list[EpisodeStats]) -> EpisodeStats:
    successes = [p.successes for p in parts]
    return EpisodeStats(
        returns=torch.cat([p.returns for p in parts]),
        lengths=torch.cat([p.lengths for p in parts]),
        successes=None if successes[0] is None else torch.cat(successes),
    )
