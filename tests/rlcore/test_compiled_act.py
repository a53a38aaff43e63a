"""The compiled act step (`rlcore.compiled_act`, `runtime.compile`'s collection): the same
draws and the same actions as eager `act`, in the collector too, and no recompiling as the
parameters learn."""

import gymnasium.spaces as spaces
import pytest
import torch
from torch._dynamo.utils import counters

from rlcore.collector import SyncCollector
from rlcore.compiled_act import CompiledAct
from rlcore.envs import CartPole, Pendulum
from rlcore.policies import ActorCritic, PolicyConfig
from rlcore.rollout import ACTION, OBS, REWARD, SAMPLE_LOG_PROB, VALUE, RolloutSpec, make_rollout


def _update_norms(policy: ActorCritic, obs: torch.Tensor) -> None:
    for norm in policy.inputs.norms.values():  # the flat entry's normaliser
        norm.update(obs)


def _policy(action_space: spaces.Space, obs_dim: int = 3) -> ActorCritic:
    torch.manual_seed(0)
    cfg = PolicyConfig(hidden_sizes=(16, 16), normalize_obs=True)
    return ActorCritic(obs_dim, action_space, cfg)


@pytest.mark.parametrize(
    "space", [spaces.Box(-2.0, 2.0, (2,)), spaces.Discrete(3)], ids=["gaussian", "discrete"]
)
def test_compiled_act_draws_what_eager_act_draws_and_acts_alike(space):
    policy = _policy(space)
    obs = torch.randn(32, 3)
    _update_norms(policy, obs)  # normalisation statistics that are not the identity
    compiled = CompiledAct(policy)
    eager_gen, compiled_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    with torch.inference_mode():
        for _ in range(3):  # consecutive calls: the streams stay in step
            eager = policy.act(obs, eager_gen)
            fast = compiled.act(obs, compiled_gen)
            if isinstance(space, spaces.Discrete):
                assert torch.equal(fast.action, eager.action)
            else:
                torch.testing.assert_close(fast.action, eager.action, atol=1e-5, rtol=0)
            torch.testing.assert_close(fast.log_prob, eager.log_prob, atol=1e-5, rtol=0)
            torch.testing.assert_close(fast.value, eager.value, atol=1e-5, rtol=0)
            torch.testing.assert_close(compiled.value(obs), policy.value(obs))
    assert torch.equal(eager_gen.get_state(), compiled_gen.get_state())


def test_eager_act_samples_actions_from_its_distribution():
    # The draws moved ahead of the networks: sampling itself is unchanged. 20,000 draws
    # of a Gaussian policy: their mean and spread are the policy's mean and std.
    policy = _policy(spaces.Box(-2.0, 2.0, (2,)))
    obs = torch.zeros(20_000, 3)
    with torch.inference_mode():
        out = policy.act(obs, torch.Generator().manual_seed(0))
        mean = policy._actor_out(obs[:1])[0]
    std = policy.log_std.exp()
    torch.testing.assert_close(out.action.mean(0), mean, atol=4 * std.max().item() / 141, rtol=0)
    torch.testing.assert_close(out.action.std(0), std, atol=0.02, rtol=0)


def _collector(env, compiled: bool):
    policy = _policy(env.action_space, env.obs_dim)
    rollout = make_rollout(RolloutSpec.for_env(env, 16, with_value=True))
    collector = SyncCollector(
        env, policy, rollout, torch.Generator().manual_seed(1), host_checks=not compiled,
        compile_act=compiled,
    )  # fmt: skip
    collector.reset(seed=0)
    return collector, policy, rollout


def test_a_compiled_collector_fills_the_rollout_as_the_eager_one_does():
    # Pendulum: continuous actions, no early ends, so rounding cannot fork the episodes.
    eager, _, eager_ro = _collector(Pendulum(4), compiled=False)
    fast, _, fast_ro = _collector(Pendulum(4), compiled=True)
    for _ in range(2):
        eager.collect()
        fast.collect()
        for key in (ACTION, SAMPLE_LOG_PROB, VALUE, REWARD, OBS):
            torch.testing.assert_close(fast_ro[key], eager_ro[key], atol=1e-4, rtol=1e-4)


def test_learning_between_rollouts_does_not_recompile_the_act_step():
    collector, policy, rollout = _collector(CartPole(4), compiled=True)
    collector.collect()  # compiles
    frames = counters["stats"]["unique_graphs"]
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
    for _ in range(3):
        loss = sum(p.square().sum() for p in policy.parameters())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        _update_norms(policy, torch.randn(64, 4))
        collector.collect()
        with torch.inference_mode():  # the compiled values are the new weights' values
            eager_values = policy.value(rollout[OBS][:, :-1].reshape(-1, 4)).view(4, -1)
        torch.testing.assert_close(rollout[VALUE][:, :-1], eager_values, atol=1e-5, rtol=0)
    assert counters["stats"]["unique_graphs"] == frames


def test_policies_other_than_actors_act_eagerly_under_compile_act():
    from rlcore.policies import UniformRandomPolicy

    env = Pendulum(2)
    rollout = make_rollout(RolloutSpec.for_env(env, 4, with_value=False))
    random_policy = UniformRandomPolicy(env.action_space)
    collector = SyncCollector(
        env, random_policy, rollout, torch.Generator().manual_seed(0), compile_act=True
    )
    assert collector._compiled is None
    collector.reset(seed=0)
    collector.collect()
    assert rollout[ACTION][:, :-1].abs().max() <= 2.0
