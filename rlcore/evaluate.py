"""Deterministic evaluation on a separate env instance."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.errors import NonFiniteError
from rlcore.policies import Actor


class Episodes(NamedTuple):
    """One finished episode per env instance.

    Shape:
        returns: [N] float64; lengths: [N] int64; successes: [N] bool, or None
    """

    returns: torch.Tensor
    lengths: torch.Tensor
    successes: torch.Tensor | None


def evaluate(policy: Actor, env: BatchedEnv, seed: int) -> dict[str, float]:
    """Run one episode in each of the env's N instances with the policy's mode action.

    The env is reset with `seed`, so the same policy always gets the same score. Returns
    `eval/episode_return` (mean), `eval/episode_return_min`, `eval/episode_length` and,
    for envs that report it, `eval/success_rate`.
    """
    episodes = run_episodes(policy, env, seed)
    metrics = {
        "eval/episode_return": episodes.returns.mean().item(),
        "eval/episode_return_min": episodes.returns.min().item(),
        "eval/episode_length": episodes.lengths.double().mean().item(),
    }
    if episodes.successes is not None:
        metrics["eval/success_rate"] = episodes.successes.double().mean().item()
    return metrics


@torch.inference_mode()
def run_episodes(
    policy: Actor,
    env: BatchedEnv,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> Episodes:
    """One deterministic (mode-action) episode in each of the env's N instances.

    Raises `NonFiniteError` if any return is NaN or infinite: a score that cannot be right
    is never reported. `progress(steps, finished)` is told, every 8 steps, how many steps
    the episodes have run (they run side by side, so most end together near the time
    limit, and a count of finished ones alone gives no pace) and how many have finished.
    """
    n = env.num_envs
    obs = env.reset(seed=seed)
    slot = StepSlot.allocate(n, env.obs_spec, env.device, env.has_success)
    returns = torch.zeros(n, dtype=torch.float64, device=env.device)
    lengths = torch.zeros(n, dtype=torch.int64, device=env.device)
    running = torch.ones(n, dtype=torch.bool, device=env.device)
    success = torch.zeros(n, dtype=torch.bool, device=env.device)
    for step in range(env.max_episode_steps):
        env.step(policy.act_deterministic(obs), slot)
        returns += slot.reward * running
        lengths += running
        if slot.success is not None:
            success |= slot.success & running & slot.done
        running &= ~slot.done
        obs = slot.next_obs
        if step % 8 == 7:  # a host sync: not every step
            still = int(running.sum())
            if progress is not None:
                progress(step + 1, n - still)
            if not still:
                break
    bad = int((~returns.isfinite()).sum())
    if bad:
        raise NonFiniteError(
            f"evaluation on {getattr(env, 'name', type(env).__name__)}: {bad} of {n} episode "
            f"returns are NaN or infinite (the env yields non-finite rewards, or the policy "
            f"drives it there); no score is reported"
        )
    return Episodes(returns, lengths, success if env.has_success else None)
