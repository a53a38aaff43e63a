"""Deterministic evaluation on a separate env instance."""

from __future__ import annotations

import torch

from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.policies import Actor


@torch.inference_mode()
def evaluate(policy: Actor, env: BatchedEnv, seed: int) -> dict[str, float]:
    """Run one episode in each of the env's N instances with the policy's mode action.

    The env is reset with `seed`, so the same policy always gets the same score. Returns
    `eval/episode_return` (mean), `eval/episode_return_min`, `eval/episode_length` and,
    for envs that report it, `eval/success_rate`.
    """
    n = env.num_envs
    obs = env.reset(seed=seed)
    slot = StepSlot.allocate(n, env.obs_dim, env.device, env.has_success)
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
        if step % 8 == 7 and not running.any():
            break
    metrics = {
        "eval/episode_return": returns.mean().item(),
        "eval/episode_return_min": returns.min().item(),
        "eval/episode_length": lengths.double().mean().item(),
    }
    if env.has_success:
        metrics["eval/success_rate"] = success.double().mean().item()
    return metrics
