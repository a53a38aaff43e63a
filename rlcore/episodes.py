"""Episode returns and lengths from a whole rollout at once.

Tracking running sums step by step costs a handful of tiny kernels on every env step, each
paying the warm-up penalty of running right after the policy's matrix multiplies (measured
~1.9 ms per 4096 x 32 CartPole rollout). Here the rewards are summed once per rollout: one
cumulative sum along time, then arithmetic on the few positions where an episode ended.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Segments(NamedTuple):
    """Episodes that ended inside one rollout, in env-major order (env, then time).

    Shape (E episode ends, N envs):
        env, step: [E] int64, where each episode ended
        returns: [E] float32; lengths: [E] int64
        carry: [2, N] float32, return and length of the episodes still running at the end
    """

    env: torch.Tensor
    step: torch.Tensor
    returns: torch.Tensor
    lengths: torch.Tensor
    carry: torch.Tensor


def episode_segments(reward: torch.Tensor, ends: torch.Tensor, carry: torch.Tensor) -> Segments:
    """Split each env's rewards at `ends` and sum every piece.

    An episode ends after step t of env n where `ends[t, n]`; the next one starts at t + 1.
    `carry` holds the return (row 0) and length (row 1) that each env's current episode had
    accumulated before this rollout; they are added to its first piece. Sums are taken in
    float64, so a piece's return is as exact as a fresh float32 sum of its rewards.

    Inputs are time-major, as the rollout stores them: every pass below runs over
    contiguous memory (on CPU a strided `nonzero` or `cumsum` over [T, N] is 5-10x slower).

    Shape:
        reward: [T, N] float; ends: [T, N] bool; carry: [2, N] float
    """
    horizon, n = reward.shape
    cum = reward.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    for t in range(1, horizon):  # T vector adds beat torch.cumsum(dim=0) ~5x on CPU
        cum[t].add_(cum[t - 1])
    cum_flat = cum.view(-1)
    carry_return, carry_length = carry[0].double(), carry[1].double()

    flat_by_time = ends.reshape(-1).nonzero().squeeze(1)
    env, order = (flat_by_time % n).sort(stable=True)  # stable: time order within an env
    flat = flat_by_time[order]
    step = flat // n
    at_end = cum_flat[flat]
    first = torch.ones_like(env, dtype=torch.bool)
    first[1:] = env[1:] != env[:-1]  # the env's first end in this rollout
    base = torch.where(first, -carry_return[env], at_end.roll(1))
    started = torch.where(first, -1.0 - carry_length[env], step.roll(1).double())

    last = torch.ones_like(first)
    last[:-1] = first[1:]  # the env's last end in this rollout
    last_ids = last.nonzero().squeeze(1)
    ended_envs, last_step = env[last_ids], step[last_ids]
    running_return = carry_return + cum[-1]
    running_length = carry_length + horizon
    running_return[ended_envs] = cum[-1, ended_envs] - at_end[last_ids]
    running_length[ended_envs] = (horizon - 1 - last_step).double()
    return Segments(
        env=env,
        step=step,
        returns=(at_end - base).float(),
        lengths=(step - started).long(),
        carry=torch.stack([running_return, running_length]).float(),
    )
