"""Reward normalisation by the running std of the discounted return (PPO's normalize_reward)."""

import dataclasses
import math

import torch

from rlcore.return_norm import ReturnNormalizer
from rlcore.trainer import Trainer
from tests.rlcore.test_trainer import params, small_config


def test_rewards_are_scaled_by_the_std_of_the_discounted_returns():
    norm = ReturnNormalizer(gamma=0.5)
    reward = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    done = torch.tensor([[False, True, False], [False, False, False]])
    scaled = norm.normalize(reward, done).clone()
    # Returns: env 0: 1, 0.5 * 1 + 2 = 2.5, then a new episode: 3; env 1: 4, 2, 1.
    returns = [1.0, 2.5, 3.0, 4.0, 2.0, 1.0]
    mean = sum(returns) / 6
    var = sum((r - mean) ** 2 for r in returns) / 6  # 1.1458...
    torch.testing.assert_close(scaled, reward / math.sqrt(var + 1e-8))
    assert norm.returns is not None and norm.returns.tolist() == [3.0, 1.0]  # carried on

    # The next rollout continues each env's return and merges into the statistics.
    norm.normalize(torch.tensor([[1.0], [1.0]]), torch.tensor([[False], [True]]))
    more = [*returns, 0.5 * 3.0 + 1.0, 0.5 * 1.0 + 1.0]
    mean = sum(more) / 8
    var = sum((r - mean) ** 2 for r in more) / 8
    assert math.isclose(norm.return_std, math.sqrt(var), rel_tol=1e-12)
    assert norm.returns.tolist() == [2.5, 0.0]  # env 1's episode ended


def test_scaled_rewards_are_clipped():
    norm = ReturnNormalizer(gamma=0.99, clip=10.0)
    # One return so far: its variance is 0, so the scale is 1 / sqrt(eps) and clipping acts.
    scaled = norm.normalize(torch.tensor([[3.0], [3.0]]), torch.zeros(2, 1, dtype=torch.bool))
    assert scaled.tolist() == [[10.0], [10.0]]


def test_no_allocation_after_the_first_rollout():
    norm = ReturnNormalizer(gamma=0.9)
    reward, done = torch.rand(4, 8), torch.zeros(4, 8, dtype=torch.bool)
    first = norm.normalize(reward, done)
    second = norm.normalize(reward, done)
    assert first.data_ptr() == second.data_ptr()  # the same output buffer every rollout


def test_exact_resume_with_reward_normalisation(tmp_path):
    base = small_config("pendulum", "ppo")
    cfg = dataclasses.replace(base, algo=dataclasses.replace(base.algo, normalize_reward=True))
    straight = Trainer(cfg)
    metrics = {}
    straight.sink = lambda step, m: metrics.update(m)
    straight.run()
    assert metrics["stats/return_std"] > 0

    first = Trainer(cfg)
    first.run(max_iters=3, checkpoint_path=tmp_path / "ckpt.pt")
    resumed = Trainer(cfg)
    resumed.load(tmp_path / "ckpt.pt")
    resumed.run()
    assert torch.equal(params(straight), params(resumed))
    assert torch.equal(straight.algo.return_norm.stats.var, resumed.algo.return_norm.stats.var)
    assert torch.equal(straight.algo.return_norm.returns, resumed.algo.return_norm.returns)

    plain = Trainer(base)
    plain.run()
    assert not torch.equal(params(plain), params(straight))  # the option does act
