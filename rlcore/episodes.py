"""Episode returns and lengths from a whole rollout at once, and `EpisodeStats`: the episodes
that finished in one rollout, as a collector reports them.

Tracking running sums step by step costs a handful of tiny kernels on every env step, each
paying the warm-up penalty of running right after the policy's matrix multiplies. Here the
rewards are summed once per rollout: one cumulative sum along time, then arithmetic on the
few positions where an episode ended.

`episode_totals` gives only the sums over those episodes (and the running carry) with
fixed-shape ops, so that a training iteration that reads just the totals never waits for
an accelerator; `episode_segments` lists every episode (its shapes depend on the data).
"""

from __future__ import annotations

from collections.abc import Callable
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


def _running_sum(values: torch.Tensor) -> torch.Tensor:
    """Float64 running sums over time of a [T, N] tensor, in a fresh contiguous tensor."""
    out = values.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    for t in range(1, out.shape[0]):  # T vector adds beat torch.cumsum(dim=0) on CPU
        out[t].add_(out[t - 1])
    return out


def episode_segments(
    reward: torch.Tensor,
    ends: torch.Tensor,
    carry: torch.Tensor,
    valid: torch.Tensor | None = None,
) -> Segments:
    """Split each env's rewards at `ends` and sum every piece.

    An episode ends after step t of env n where `ends[t, n]`; the next one starts at t + 1.
    `carry` holds the return (row 0) and length (row 1) that each env's current episode had
    accumulated before this rollout; they are added to its first piece. Sums are taken in
    float64, so a piece's return is as exact as a fresh float32 sum of its rewards.

    With `valid`, lengths count only the valid steps (an env's invalid steps carry no
    reward and are no part of any episode).

    Inputs are time-major, as the rollout stores them: every pass below runs over
    contiguous memory (on CPU a strided `nonzero` or `cumsum` over [T, N] is several times
    slower).

    Shape:
        reward: [T, N] float; ends: [T, N] bool; carry: [2, N] float; valid: [T, N] bool
    """
    horizon, n = reward.shape
    cum = _running_sum(reward)
    cum_flat = cum.view(-1)
    carry_return, carry_length = carry[0].double(), carry[1].double()
    # a running count of valid steps, read like the rewards
    steps = None if valid is None else _running_sum(valid)

    flat_by_time = ends.reshape(-1).nonzero().squeeze(1)
    env, order = (flat_by_time % n).sort(stable=True)  # stable: time order within an env
    flat = flat_by_time[order]
    step = flat // n
    at_end = cum_flat[flat]
    first = torch.ones_like(env, dtype=torch.bool)
    first[1:] = env[1:] != env[:-1]  # the env's first end in this rollout
    base = torch.where(first, -carry_return[env], at_end.roll(1))
    # Steps counted up to and including each end (every step, or only the valid ones).
    clock = (step + 1).double() if steps is None else steps.view(-1)[flat]
    clock_base = torch.where(first, -carry_length[env], clock.roll(1))

    last = torch.ones_like(first)
    last[:-1] = first[1:]  # the env's last end in this rollout
    last_ids = last.nonzero().squeeze(1)
    ended_envs = env[last_ids]
    clock_now = torch.full_like(carry_length, horizon) if steps is None else steps[-1]
    running_return = carry_return + cum[-1]
    running_length = carry_length + clock_now
    running_return[ended_envs] = cum[-1, ended_envs] - at_end[last_ids]
    running_length[ended_envs] = clock_now[ended_envs] - clock[last_ids]
    return Segments(
        env=env,
        step=step,
        returns=(at_end - base).float(),
        lengths=(clock - clock_base).round().long(),
        carry=torch.stack([running_return, running_length]).float(),
    )


class Totals(NamedTuple):
    """Sums over the episodes that ended (and were counted) inside one rollout.

    Shape (N envs):
        sums: [4] float64: episodes, sum of returns, sum of lengths, successes (0 without
            `success`), as `EpisodeStats.totals` reports them
        carry: [2, N] float32, as `Segments.carry`
    """

    sums: torch.Tensor
    carry: torch.Tensor


def episode_totals(
    reward: torch.Tensor,
    ends: torch.Tensor,
    carry: torch.Tensor,
    valid: torch.Tensor | None = None,
    counted: torch.Tensor | None = None,
    success: torch.Tensor | None = None,
) -> Totals:
    """What `episode_segments` gives summed over the counted ends, with its `carry`, in
    fixed-shape tensor ops only.

    No `nonzero`, boolean-mask indexing or host read: the shapes never depend on the data, so
    on an accelerator nothing waits for the device. One pass over time keeps each env's
    running return and step count, and their values where its current piece started (its
    previous end, or minus `carry` before its first): every step is read as a possible end,
    whose piece is the difference. Each piece's return is rounded to float32 before it is
    summed in float64, as a sum of `Segments.returns` is; the carry is bit for bit
    `episode_segments`'.

    Ends are reported where `counted` (default: every end) and summed with `success` at
    the end step; ends that are not counted still split the episodes (and the carry).

    Shape:
        reward: [T, N] float; ends, valid, counted, success: [T, N] bool; carry: [2, N] float
    """
    horizon, n = reward.shape
    # Running sums at each step (t, row, env): the return (row 0) and the steps counted so
    # far (row 1: every step, or only the valid ones), as `episode_segments` takes them.
    at = reward.new_empty((horizon, 2, n), dtype=torch.float64)
    at[:, 0] = reward
    at[:, 1] = 1.0 if valid is None else valid
    # The same sums where each step's piece starts: at the env's last end before the step,
    # or minus the carry (row t + 1 is after step t).
    start = reward.new_empty((horizon + 1, 2, n), dtype=torch.float64)
    start[0] = carry
    start[0].neg_()
    for t in range(horizon):  # 2T row ops beat a cummax and gathers over [T, N] on CPU
        if t:
            at[t].add_(at[t - 1])
        torch.where(ends[t], at[t], start[t], out=start[t + 1])

    carry_out = (at[-1] - start[-1]).float()
    pieces = at.sub_(start[:-1])  # the return and length of the piece that ends at each step
    pieces[:, 0] = pieces[:, 0].float()  # a `Segments.returns` value
    pieces[:, 1].round_()
    reported = ends if counted is None else ends & counted
    zero = pieces.new_zeros(())
    sums = torch.cat(
        [
            reported.sum(dtype=torch.float64).reshape(1),
            torch.where(reported.unsqueeze(1), pieces, zero).sum((0, 2)),
            (zero if success is None else (reported & success).sum(dtype=torch.float64)).reshape(1),
        ]
    )
    return Totals(sums=sums, carry=carry_out)


EpisodeLists = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
"""Returns, lengths and successes (or None) of the finished episodes."""


class EpisodeStats:
    """Episodes that finished during one rollout.

    `EpisodeStats(returns, lengths, successes)` holds the per-episode lists. A collector's
    stats hold only their `totals()` (computed on the device, without a host sync) and
    compute the lists on first access of `returns`, `lengths` or `successes` from the
    rollout, which the collector's next `collect` overwrites: read them (or call `resolve`)
    before that, or they raise.

    Shape:
        returns, lengths: [E] for E finished episodes; successes: [E] bool or None
    """

    def __init__(
        self,
        returns: torch.Tensor,
        lengths: torch.Tensor,
        successes: torch.Tensor | None,
    ) -> None:
        self._episodes: EpisodeLists | None = (returns, lengths, successes)
        self._compute: Callable[[], EpisodeLists] | None = None
        self._totals: torch.Tensor | None = None
        self.has_successes = successes is not None

    @classmethod
    def deferred(
        cls,
        totals: torch.Tensor,
        has_successes: bool,
        compute: Callable[[], EpisodeLists],
    ) -> EpisodeStats:
        """Stats whose `totals()` are `totals` and whose lists `compute()` returns when first
        read (`has_successes`: whether they hold `successes`)."""
        stats = cls.__new__(cls)
        stats._episodes, stats._compute, stats._totals = None, compute, totals
        stats.has_successes = has_successes
        return stats

    def resolve(self) -> EpisodeStats:
        """Compute the per-episode lists now, so that they outlive the rollout; returns self."""
        if self._episodes is None:
            assert self._compute is not None
            self._episodes, self._compute = self._compute(), None
        return self

    @property
    def returns(self) -> torch.Tensor:
        """[E] float32 return of each finished episode."""
        return self._lists()[0]

    @property
    def lengths(self) -> torch.Tensor:
        """[E] int64 length of each finished episode."""
        return self._lists()[1]

    @property
    def successes(self) -> torch.Tensor | None:
        """[E] bool, whether each finished episode succeeded (None: the env reports none)."""
        return self._lists()[2]

    def _lists(self) -> EpisodeLists:
        episodes = self.resolve()._episodes
        assert episodes is not None
        return episodes

    def totals(self) -> torch.Tensor:
        """[episodes, sum of returns, sum of lengths, successes] as float64 on the lists'
        device (no host sync): sums, so those of several data-parallel ranks add up. A fresh
        tensor each call (the caller may reduce it in place)."""
        if self._totals is not None:
            return self._totals.clone()
        returns, lengths, successes = self._lists()
        zero = returns.new_zeros((), dtype=torch.float64)
        succeeded = zero if successes is None else successes.double().sum()
        count = zero + returns.numel()
        return torch.stack([count, returns.double().sum(), lengths.double().sum(), succeeded])

    def metrics(
        self, prefix: str = "train", totals: torch.Tensor | None = None
    ) -> dict[str, float]:
        """Means over the finished episodes (empty dict if none finished), from `totals`
        (default: this rollout's own; the trainer passes those summed over ranks). Reads
        the totals on the host."""
        count, returns, lengths, successes = (self.totals() if totals is None else totals).tolist()
        if count == 0:
            return {}
        out = {
            f"{prefix}/episode_return": returns / count,
            f"{prefix}/episode_length": lengths / count,
            f"{prefix}/episodes": count,
        }
        if self.has_successes:
            out[f"{prefix}/success_rate"] = successes / count
        return out
