import pytest
import torch

from rlcore.algos.compile import check_compile_available
from rlcore.algos.config import GRPOConfig, PPOConfig
from rlcore.algos.grpo import GRPO
from rlcore.algos.ppo import PPO
from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig, TrainerConfig
from rlcore.envs import CartPole, Pendulum
from rlcore.errors import CompileUnavailableError
from rlcore.policies import Actor, ActorCritic
from rlcore.rollout import RolloutSpec, make_rollout
from rlcore.trainer import Trainer


def flat_params(policy):
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def one_update(algo_cls, compile_loss):
    """One collection, then one update, from fixed seeds: eager and compiled see the same."""
    torch.manual_seed(0)
    if algo_cls is PPO:
        env, groups = Pendulum(8), None
        policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
        spec = RolloutSpec.for_env(env, 16, with_value=True)
        # 3 minibatches of 42-43 rows and chunks of 20: the shapes change within the update.
        cfg = PPOConfig(num_epochs=2, num_minibatches=3, microbatch_size=20)
    else:
        env, groups = CartPole(8), GroupEpisodes(4)
        policy = Actor(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
        spec = RolloutSpec.for_env(env, 48, with_value=False, with_mask=True)
        cfg = GRPOConfig(num_epochs=2, num_minibatches=2, group_size=4, kl_coef=0.1)
    rollout = make_rollout(spec)
    collector = SyncCollector(env, policy, rollout, torch.Generator().manual_seed(1), groups)
    collector.reset(seed=0)
    collector.collect()
    before = flat_params(policy)
    algo = algo_cls(policy, cfg, 1, torch.Generator().manual_seed(2), compile_loss=compile_loss)
    metrics = algo.update(rollout)
    return before, flat_params(policy), metrics


@pytest.mark.parametrize("algo_cls", [PPO, GRPO])
def test_the_compiled_loss_takes_the_eager_step(algo_cls):
    before, eager, eager_metrics = one_update(algo_cls, compile_loss=False)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    _, compiled, compiled_metrics = one_update(algo_cls, compile_loss=True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # really compiled
    assert not torch.allclose(before, eager)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-4)
    for key in ("loss/policy", "stats/approx_kl", "stats/clip_fraction"):
        assert compiled_metrics[key] == pytest.approx(eager_metrics[key], rel=1e-3, abs=1e-6)


def test_without_a_cpu_compiler_the_trainer_refuses_before_training(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++, c++ or clang++ on it
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(CompileUnavailableError, match=r"needs a C\+\+ compiler"):
        check_compile_available(torch.device("cpu"))
    cfg = ExperimentConfig(
        env=EnvConfig(name="cartpole", num_envs=4), trainer=TrainerConfig(num_steps=8)
    )
    with pytest.raises(CompileUnavailableError, match=r"runtime\.compile"):
        Trainer(cfg, compile_loss=True)
    Trainer(cfg)  # eager training needs no compiler
