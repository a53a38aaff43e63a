"""The collector's T steps as one CUDA graph (`rlcore.collection_graph`, `runtime.compile`
on CUDA): from the second rollout on, one replay writes what eager steps write.

The graph itself needs CUDA: those tests are skipped without it (and were run on an H100,
benchmarks/README.md, *fast_path*). Which collectors graph their steps is checked anywhere.
"""

from __future__ import annotations

import pytest
import torch

from rlcore.algos.ppo import PPOConfig
from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig, TrainerConfig
from rlcore.envs import make_env
from rlcore.envs.torch_env import ColumnStateEnv
from rlcore.policies import Actor, ActorCritic
from rlcore.rollout import RolloutSpec, make_rollout
from rlcore.trainer import Trainer
from tests.rlcore.resume import straight_and_resumed

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def collector_for(env_name: str, device: str, graph_steps: bool) -> SyncCollector:
    """A seeded collector of a small actor-critic over 64 `env_name` envs (episodes of at
    most 10 steps), reset."""
    env = make_env(EnvConfig(env_name, num_envs=64, device=device))
    env.set_max_episode_steps(10)  # time-limit ends (bootstrapped values) in every rollout
    torch.manual_seed(0)
    policy = ActorCritic(env.obs_spec, env.action_space, PolicyConfig(hidden_sizes=(32, 32)))
    rollout = make_rollout(RolloutSpec.for_env(env, 16, with_value=True))
    generator = torch.Generator(device=device).manual_seed(1)
    collector = SyncCollector(
        env, policy.to(device), rollout, generator, host_checks=False, graph_steps=graph_steps
    )
    collector.reset(seed=0)
    return collector


def test_a_cpu_env_refuses_graphed_steps_naming_why():
    with pytest.raises(ValueError, match="graph_steps: the env runs on cpu, not CUDA"):
        collector_for("cartpole", "cpu", graph_steps=True)


def test_only_builtin_envs_on_cuda_offer_their_steps_to_a_graph():
    assert make_env(EnvConfig("push_cube", num_envs=4)).graph_generators() is None  # host work
    gym = make_env(EnvConfig("gymnasium:CartPole-v1", num_envs=2))
    try:
        assert gym.graph_generators() is None
    finally:
        gym.close()
    if torch.cuda.is_available():
        env = make_env(EnvConfig("push_cube", num_envs=4, device="cuda"))
        assert env.graph_generators() == (env.generator,)


def test_native_mujoco_envs_keep_their_steps_out_of_a_graph():
    pytest.importorskip("mujoco")  # the [mujoco] extra (installed in CI)
    env = make_env(EnvConfig("mujoco:HalfCheetah", num_envs=2))
    assert env.graph_generators() is None  # MuJoCo Warp launches its own graphs on CUDA


def test_a_compiled_trainer_on_cpu_collects_eagerly():
    cfg = ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=8),
        policy=PolicyConfig(hidden_sizes=(16,)),
        trainer=TrainerConfig(total_env_steps=8 * 16 * 2, num_steps=16, eval_every_iters=0),
        algo=PPOConfig(num_epochs=1, num_minibatches=2),
    )
    trainer = Trainer(cfg, compile_loss=True)
    assert not trainer.collector.graphs_steps


@needs_cuda
@pytest.mark.parametrize("env_name", ["cartpole", "pendulum", "push_cube", "push_cube_pixels"])
def test_graphed_steps_write_what_eager_steps_write(env_name):
    graphed = collector_for(env_name, "cuda", graph_steps=True)
    eager = collector_for(env_name, "cuda", graph_steps=False)
    assert graphed.graphs_steps and not eager.graphs_steps
    for rollout in range(4):  # eager then captured, then three replays
        stats = graphed.collect(), eager.collect()
        for key in eager.rollout.keys(include_nested=True, leaves_only=True):
            torch.testing.assert_close(graphed.rollout[key], eager.rollout[key], msg=str(key))
        torch.testing.assert_close(stats[0].totals(), stats[1].totals())
        torch.testing.assert_close(stats[0].returns, stats[1].returns)
        # An update between rollouts changes the parameters in place: replays read them.
        with torch.no_grad():
            for collector in (graphed, eager):
                for param in collector.policy.parameters():
                    param.mul_(1.0 + 0.01 * (rollout + 1))
    assert graphed.graph_captured
    assert bool(eager.rollout["done"].any()), "no episode ended: the resets went untested"


@needs_cuda
def test_grouped_episodes_step_eagerly():
    groups = GroupEpisodes(group_size=4)
    env = make_env(EnvConfig("cartpole", num_envs=8, device="cuda"))
    policy = Actor(env.obs_spec, env.action_space, PolicyConfig(hidden_sizes=(8,))).to("cuda")
    rollout = make_rollout(RolloutSpec.for_env(env, 4, with_value=False, with_mask=True))
    with pytest.raises(ValueError, match=r"grouped episodes \(GRPO\) collect eagerly"):
        SyncCollector(env, policy, rollout, torch.Generator("cuda"), groups=groups,
                      host_checks=False, graph_steps=True)  # fmt: skip


@needs_cuda
@pytest.mark.parametrize("graphed", [True, False], ids=["graphed", "eager-steps"])
def test_a_compiled_run_on_cuda_resumes_bit_identically(tmp_path, monkeypatch, graphed):
    if not graphed:  # the same run with the steps eager: tells a graph's fault from others'
        monkeypatch.setattr(ColumnStateEnv, "graph_generators", lambda self: None)
    cfg = ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=64, device="cuda"),
        policy=PolicyConfig(hidden_sizes=(32, 32)),
        trainer=TrainerConfig(total_env_steps=64 * 32 * 5, num_steps=32, eval_every_iters=0),
        algo=PPOConfig(num_epochs=2, num_minibatches=2),
    )

    straight, resumed = straight_and_resumed(
        cfg, tmp_path / "ckpt.pt", 2, compile_loss=True, sync_every=3
    )
    assert straight.collector.graph_captured == graphed
    assert resumed.iteration == straight.iteration == 5
    for mine, theirs in zip(resumed.policy.parameters(), straight.policy.parameters(), strict=True):
        assert torch.equal(mine, theirs)
