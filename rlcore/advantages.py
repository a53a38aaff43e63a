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


def discounted_returns(
    reward: torch.Tensor, done: torch.Tensor, gamma: float, returns_out: torch.Tensor
) -> None:
    """Write step-wise discounted returns-to-go, cut at episode ends, into `returns_out`.

    `G_t = r_t + gamma * G_{t+1}` within an episode and `G_t = r_t` where `done_t`; the last
    step of the rollout is `G_{T-1} = r_{T-1}` (no critic, so nothing to bootstrap with).

    Shape:
        reward, done, returns_out: [N, T]
    """
    decay = (~done).float().mul_(gamma)
    returns_out[:, -1] = reward[:, -1]
    for t in range(reward.shape[1] - 2, -1, -1):
        torch.addcmul(reward[:, t], decay[:, t], returns_out[:, t + 1], out=returns_out[:, t])


def group_normalize(
    returns: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    eps: float,
    advantage_out: torch.Tensor,
) -> torch.Tensor:
    """Write masked group-normalised advantages; return the mean within-group return std
    (a 0-d tensor on the device: no host read).

    Envs `[kG, (k+1)G)` form group k. At every step, the mean and (unbiased) std are taken
    over the group's members with `mask` set, and `A = (G - mean) / (std + eps)` for them;
    masked members get 0, and so does a lone unmasked member (nothing to compare with).
    The returned figure averages the std over (group, step) cells with >= 2 members.

    Shape:
        returns, mask, advantage_out: [N, T] with N divisible by `group_size`
    """
    num_envs, num_steps = returns.shape
    shape = (num_envs // group_size, group_size, num_steps)
    m = mask.view(shape)
    # `where`, not a product with the mask: masked returns may be anything, even NaN.
    g = torch.where(m, returns.view(shape), 0.0)
    count = m.sum(1, keepdim=True, dtype=g.dtype)
    mean = g.sum(1, keepdim=True) / count.clamp_min(1.0)
    deviation = (g - mean).masked_fill_(~m, 0.0)
    std = (deviation.square().sum(1, keepdim=True) / (count - 1.0).clamp_min(1.0)).sqrt_()
    torch.div(deviation, std + eps, out=advantage_out.view(shape))
    compared = count >= 2
    cells = compared.sum(dtype=std.dtype)
    return torch.where(compared, std, 0.0).sum() / cells.clamp_min(1.0)
