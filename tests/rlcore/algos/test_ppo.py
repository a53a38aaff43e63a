import math
from dataclasses import replace

import pytest
import torch

from rlcore.algos import ppo as ppo_module
from rlcore.algos.config import MIN_AUTO_MICROBATCH, PPOConfig
from rlcore.algos.losses import clipped_surrogate, raise_if_non_finite
from rlcore.algos.minibatch import iterate_minibatches
from rlcore.algos.ppo import PPO, value_loss
from rlcore.collector import SyncCollector
from rlcore.envs import CartPole, Pendulum
from rlcore.errors import NonFiniteError
from rlcore.policies import ActorCritic, PolicyConfig
from rlcore.presets import PRESETS
from rlcore.rollout import (
    ACTION,
    ADVANTAGE,
    DONE,
    FINAL_VALUE,
    REWARD,
    SAMPLE_LOG_PROB,
    TERMINATED,
    TRUNCATED,
    VALUE_TARGET,
    RolloutSpec,
    make_rollout,
    nominal_bytes,
)
from rlcore.trainer import Trainer


def test_clipped_surrogate_at_its_bounds():
    old = torch.zeros(4)
    # ratios e^{0.5} ~ 1.65 and e^{-0.5} ~ 0.61, clip_eps 0.2 -> clipped to 1.2 and 0.8
    log_prob = torch.tensor([0.5, 0.5, -0.5, -0.5])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, ratio = clipped_surrogate(log_prob, old, adv, clip_eps=0.2)
    # per sample min(r*A, clip(r)*A): [1.2, -1.6487, 0.6065, -0.8]
    expected = -(1.2 - math.exp(0.5) + math.exp(-0.5) - 0.8) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    torch.testing.assert_close(ratio, log_prob.exp())


def test_a_non_finite_loss_is_refused_naming_its_parts():
    stats = torch.tensor([float("nan"), 2.0])
    expected = (
        r"^PPO loss became non-finite \(policy=nan, value=2\.0\); parameters were not updated$"
    )
    with pytest.raises(NonFiniteError, match=expected):
        raise_if_non_finite("PPO", torch.tensor(float("inf")), stats, {"policy": 0, "value": 1})
    raise_if_non_finite("PPO", torch.tensor(1.0), stats, {"policy": 0})  # finite: no error


def test_value_clipping_takes_the_pessimistic_error():
    # old 0, new 1, target 1, clip 0.2: unclipped error 0, clipped value 0.2 -> error 0.64
    loss = value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]), 0.2)
    assert loss.item() == pytest.approx(0.5 * 0.64)
    assert value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]), None) == 0


@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_nan_padding_never_reaches_the_losses(env_cls):
    env = env_cls(4)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
    discrete = env_cls is CartPole
    ro = make_rollout(RolloutSpec.for_env(env, 16, with_value=True))
    gen = torch.Generator().manual_seed(0)
    collector = SyncCollector(env, policy, ro, gen)
    collector.reset(seed=0)
    collector.collect()
    for key in (REWARD, SAMPLE_LOG_PROB, FINAL_VALUE, ADVANTAGE, VALUE_TARGET):
        ro[key][:, -1] = float("nan")
    if not discrete:
        ro[ACTION][:, -1] = float("nan")
    for key in (DONE, TERMINATED, TRUNCATED):
        ro[key][:, -1] = True
    ppo = PPO(policy, PPOConfig(num_epochs=2, num_minibatches=4), total_updates=1, generator=gen)
    metrics = ppo.update(ro)
    assert all(math.isfinite(metrics[k]) for k in ("loss/policy", "loss/value", "loss/entropy"))
    assert torch.isnan(ro[ADVANTAGE][:, -1]).all()  # the padding itself was left alone
    assert all(torch.isfinite(p).all() for p in policy.parameters())


def test_kl_adaptive_lr_moves_with_kl():
    env = CartPole(2)
    policy = ActorCritic(4, env.action_space, PolicyConfig())
    ppo = PPO(policy, PPOConfig(lr=1e-3, lr_schedule="kl_adaptive", desired_kl=0.01), 1,
              torch.Generator())  # fmt: skip
    ppo._adapt_lr(0.05)
    assert ppo.optimizer.lr == pytest.approx(1e-3 / 1.5)
    ppo._adapt_lr(0.001)
    assert ppo.optimizer.lr == pytest.approx(1e-3)


def test_ppo_solves_cartpole_within_a_small_budget():
    cfg = PRESETS["cartpole"]
    cfg = replace(cfg, trainer=replace(cfg.trainer, total_env_steps=150_000))
    result = Trainer(cfg).run()
    assert result.reached_target, result
    assert result.eval_metrics["eval/episode_return"] >= 475
    assert result.env_steps < 150_000


def params_before_and_after_an_update(cfg: PPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """A small Pendulum policy's flat parameters before and after one PPO update."""
    torch.manual_seed(0)
    env = Pendulum(8)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
    ro = make_rollout(RolloutSpec.for_env(env, 16, with_value=True))
    collector = SyncCollector(env, policy, ro, torch.Generator().manual_seed(0))
    collector.reset(seed=0)
    collector.collect()
    before = torch.cat([p.detach().flatten() for p in policy.parameters()])
    PPO(policy, cfg, 1, torch.Generator().manual_seed(1)).update(ro)
    return before, torch.cat([p.detach().flatten() for p in policy.parameters()])


def test_microbatches_give_the_same_update_as_whole_minibatches():
    cfg = PPOConfig(num_epochs=2, num_minibatches=2, microbatch_size=None)
    before, whole = params_before_and_after_an_update(cfg)
    # 64 transitions per minibatch: 7 chunks
    _, chunked = params_before_and_after_an_update(replace(cfg, microbatch_size=10))
    assert not torch.allclose(before, whole)
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=1e-5)


def test_one_reused_minibatch_gives_the_update_of_one_shuffled_each_epoch(monkeypatch):
    cfg = PPOConfig(num_epochs=4, num_minibatches=1, lr=1e-2)
    before, reused = params_before_and_after_an_update(cfg)

    def shuffled_each_epoch(tv, keys, num_minibatches, num_epochs, gen, where, prepare):
        for _ in range(num_epochs):  # what every epoch did before: shuffle, gather, prepare
            yield map(prepare, iterate_minibatches(tv, keys, num_minibatches, gen, where))

    monkeypatch.setattr(ppo_module, "epoch_minibatches", shuffled_each_epoch)
    _, shuffled = params_before_and_after_an_update(cfg)
    assert not torch.allclose(before, reused, atol=1e-3)
    torch.testing.assert_close(reused, shuffled, atol=1e-5, rtol=1e-5)  # only the sums' order


def test_auto_microbatch_fits_activations_in_half_the_rollout():
    env = CartPole(256)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
    # floats per sample: 2 * obs_dim (4) + actor 2 * (16 + 2) + critic 2 * (16 + 1) = 78
    assert policy.activation_bytes_per_sample() == 4 * 78
    big = make_rollout(RolloutSpec.for_env(env, 1024, with_value=True))  # 262k transitions
    ppo = PPO(policy, PPOConfig(), 1, torch.Generator())
    chunk = ppo.microbatch_size(big)
    assert chunk == nominal_bytes(big) // 2 // (4 * 78)
    assert MIN_AUTO_MICROBATCH < chunk < 256 * 1024 // 4  # splits each of the 4 minibatches
    small = make_rollout(RolloutSpec.for_env(env, 8, with_value=True))
    assert ppo.microbatch_size(small) == MIN_AUTO_MICROBATCH  # never below the floor
    fixed = PPO(policy, PPOConfig(microbatch_size=100), 1, torch.Generator())
    assert fixed.microbatch_size(big) == 100
    assert (
        PPO(policy, PPOConfig(microbatch_size=None), 1, torch.Generator()).microbatch_size(big)
        is None
    )


@pytest.mark.parametrize("bad", [0, -3, "big", 2.5, True])
def test_microbatch_size_rejects_bad_values(bad):
    with pytest.raises(ValueError, match=r"ppo\.microbatch_size must be an int >= 1, 'auto'"):
        PPOConfig(microbatch_size=bad)


def filled_rollout(num_envs=8, num_steps=16):
    torch.manual_seed(0)
    env = CartPole(num_envs)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
    ro = make_rollout(RolloutSpec.for_env(env, num_steps, with_value=True))
    collector = SyncCollector(env, policy, ro, torch.Generator().manual_seed(0))
    collector.reset(seed=0)
    collector.collect()
    return policy, ro


def test_target_kl_stops_the_epochs_early():
    policy, ro = filled_rollout()
    full = PPO(policy, PPOConfig(num_epochs=4, num_minibatches=4, lr=1e-2), 1, torch.Generator())
    assert full.update(ro)["train/minibatches"] == 16
    policy, ro = filled_rollout()
    cfg = PPOConfig(num_epochs=4, num_minibatches=4, lr=1e-2, target_kl=1e-6)
    early = PPO(policy, cfg, 1, torch.Generator()).update(ro)
    assert early["train/minibatches"] < 16


def test_linear_lr_annealing_steps_down_each_update():
    policy, ro = filled_rollout()
    ppo = PPO(policy, PPOConfig(lr=1e-3, lr_schedule="linear", num_epochs=1), 4, torch.Generator())
    lrs = [ppo.update(ro)["train/lr"] for _ in range(4)]
    assert lrs == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
