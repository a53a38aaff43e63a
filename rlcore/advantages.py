"""Advantage estimators as pure functions over [N, T] transition tensors."""

from __future__ import annotations

import torch


def compute_gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    final_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    advantage_out: torch.Tensor,
) -> None:
    """Write generalized advantage estimates (Schulman et al., 2016) into `advantage_out`.

    Bootstrapping is exact at episode ends: a terminated transition bootstraps with 0, a
    truncated one with V(true final observation) (`final_value`), and the trace is cut at
    both; elsewhere the next value is `value[:, t + 1]`, which is V(obs t+1).

    Shape:
        reward, final_value, terminated, truncated, advantage_out: [N, T]
        value: [N, T + 1] (index T is the bootstrap value after the last step)
    """
    done = terminated | truncated
    bootstrap = torch.where(truncated & ~terminated, final_value, torch.zeros_like(final_value))
    next_value = torch.where(done, bootstrap, value[:, 1:])
    delta = reward + gamma * next_value - value[:, :-1]
    decay = (~done).float().mul_(gamma * gae_lambda)
    num_steps = reward.shape[1]
    advantage_out[:, -1] = delta[:, -1]
    for t in range(num_steps - 2, -1, -1):
        torch.addcmul(delta[:, t], decay[:, t], advantage_out[:, t + 1], out=advantage_out[:, t])
