"""Reward normalisation by the running scale of the discounted return (PPO's
`normalize_reward`; what Stable-Baselines3's `VecNormalize` and Gymnasium's `NormalizeReward`
do, and RL Zoo's tuned MuJoCo PPO relies on).

Each env keeps its discounted return `R_t = gamma * R_{t-1} + r_t`, restarted after every
episode end. Rewards are divided by the standard deviation of `R` over every env and rollout
so far (pooled over data-parallel ranks, so all ranks scale alike) and clipped to
`[-clip, clip]`. The mean is not subtracted: shifting rewards would change what is optimal
where episodes can end early. The statistics take in a whole rollout before it is scaled
(SB3 updates them step by step), which changes nothing after the first rollouts.

The return trace and the scaled rewards live in buffers allocated with the first rollout
and reused every iteration (each rollout adds only the statistics' few scalars). The
statistics are shared state (saved with the algorithm); each env's running return is
per-rank state (saved with the rank's envs).
"""

from __future__ import annotations

from typing import Any

import torch

from rlcore.distributed import Distributed
from rlcore.policies import RunningNorm


class ReturnNormalizer:
    """Scales `[N, T]` rollout rewards by 1 / std(discounted return); see module docstring."""

    def __init__(self, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stats = RunningNorm(1)  # its var is the return's; its mean is not used
        self.returns: torch.Tensor | None = None  # [N], float64, allocated on first use
        self._trace: torch.Tensor | None = None  # [N, T] float64: R_t of the rollout
        self._scaled: torch.Tensor | None = None  # [N, T]: the rewards handed to GAE

    @torch.no_grad()
    def normalize(
        self, reward: torch.Tensor, done: torch.Tensor, dist: Distributed | None = None
    ) -> torch.Tensor:
        """Advance each env's return through the rollout, merge the returns into the
        statistics, and return the scaled rewards (a buffer valid until the next call)."""
        num_envs, num_steps = reward.shape
        if self._trace is None or self._trace.shape != reward.shape:
            self._trace = torch.empty(reward.shape, dtype=torch.float64, device=reward.device)
            self._scaled = torch.empty_like(reward)
            self.stats.to(reward.device)
        if self.returns is None:
            self.returns = torch.zeros(num_envs, dtype=torch.float64, device=reward.device)
        running, trace = self.returns, self._trace
        for t in range(num_steps):
            running.mul_(self.gamma).add_(reward[:, t])
            trace[:, t] = running
            running.masked_fill_(done[:, t], 0.0)  # the next episode starts from 0
        moments = (dist or Distributed()).pooled_moments(trace.reshape(-1, 1))
        self.stats.merge(*moments)
        scale = (self.stats.var + self.eps).rsqrt().to(reward.dtype)  # no device sync
        assert self._scaled is not None
        return torch.mul(reward, scale, out=self._scaled).clamp_(-self.clip, self.clip)

    @property
    def return_std(self) -> float:
        """The running std of the discounted return, which scales rewards (a host read)."""
        return float(self.stats.var.sqrt())

    def state_dict(self) -> dict[str, Any]:
        """The shared statistics (equal on every rank)."""
        return {k: v.clone() for k, v in self.stats.state_dict().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the shared statistics from `state_dict`."""
        self.stats.load_state_dict(state)

    def rank_state_dict(self) -> dict[str, Any]:
        """This rank's envs' running returns."""
        return {"returns": None if self.returns is None else self.returns.clone()}

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        """Restore this rank's running returns, so each episode's return goes on."""
        returns = state["returns"]
        self.returns = None if returns is None else returns.clone()
