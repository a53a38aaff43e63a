from dataclasses import replace

import pytest
import torch

from rlcore.algos.config import GRPOConfig
from rlcore.algos.grpo import GRPO
from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig
from rlcore.envs import CartPole
from rlcore.policies import Actor, ActorCritic
from rlcore.presets import preset
from rlcore.rollout import ADVANTAGE, MASK, OBS, REWARD, RolloutSpec, make_rollout
from rlcore.trainer import Trainer


def collected(num_envs=8, num_steps=48, seed=0):
    env = CartPole(num_envs)
    torch.manual_seed(seed)
    policy = Actor(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
    rollout = make_rollout(RolloutSpec.for_env(env, num_steps, with_value=False, with_mask=True))
    collector = SyncCollector(
        env, policy, rollout, torch.Generator().manual_seed(1), GroupEpisodes(4)
    )
    collector.reset(seed=seed)
    collector.collect()
    return policy, rollout


def flat_params(policy):
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def test_grpo_learns_cartpole():
    cfg = preset("cartpole", "grpo")  # 32 envs in groups of 4, T = 256, stops at 475
    cfg = replace(cfg, trainer=replace(cfg.trainer, total_env_steps=300_000))
    result = Trainer(cfg).run()
    assert result.reached_target, result.eval_metrics
    assert result.eval_metrics["eval/episode_return"] >= 475


def test_masked_transitions_never_reach_the_loss():
    # Poison everything outside the mask (huge but finite, as an env could produce): the
    # update must come out bit-identical.
    policy, rollout = collected()
    mask = rollout[MASK][:, :-1]
    assert not mask.all()
    poisoned = rollout.clone()
    poisoned[OBS][:, :-1][~mask] = 1e6
    poisoned[REWARD][:, :-1][~mask] = -1e6
    params = []
    for ro in (rollout, poisoned):
        torch.manual_seed(0)
        p = Actor(policy.obs_dim, CartPole.action_space, PolicyConfig(hidden_sizes=(16,)))
        p.load_state_dict(policy.state_dict())
        metrics = GRPO(p, GRPOConfig(num_epochs=2), 1, torch.Generator().manual_seed(2)).update(ro)
        params.append(flat_params(p))
        assert torch.equal(ro[ADVANTAGE][:, :-1][~mask], torch.zeros(int((~mask).sum())))
    assert torch.equal(params[0], params[1])
    assert 0 < metrics["stats/loss_fraction"] < 1
    assert metrics["stats/group_return_std"] > 0
    assert metrics["stats/approx_ref_kl"] >= 0


def test_kl_penalty_keeps_the_policy_near_the_reference():
    drift = {}
    for kl_coef in (0.0, 10.0):
        policy, rollout = collected()
        cfg = GRPOConfig(kl_coef=kl_coef, lr=3e-3, num_epochs=10)
        algo = GRPO(policy, cfg, 1, torch.Generator())
        algo.update(rollout)
        drift[kl_coef] = algo.update(rollout)["stats/approx_ref_kl"]
    assert drift[10.0] < 0.5 * drift[0.0]


def test_policy_with_a_critic_is_refused():
    env = CartPole(4)
    critic = ActorCritic(env.obs_dim, env.action_space, PolicyConfig())
    with pytest.raises(ValueError, match="grpo needs an actor-only policy"):
        GRPO(critic, GRPOConfig(), 1, torch.Generator())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"group_size": 1}, r"grpo.group_size must be an int >= 2, got 1"),
        ({"episode_mode": "all"}, r"grpo.episode_mode must be one of"),
        (
            {"episode_mode": "first_done", "reset_every_rollout": False},
            r"grpo.reset_every_rollout must be true when episode_mode is 'first_done'",
        ),
        ({"eps": 0.0}, r"grpo.eps must be > 0"),
    ],
)
def test_bad_grpo_config_names_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_group_size_must_divide_num_envs_before_any_compute():
    with pytest.raises(ValueError, match=r"grpo.group_size must divide env.num_envs \(6\), got 4"):
        ExperimentConfig(env=EnvConfig(num_envs=6), algorithm="grpo")
