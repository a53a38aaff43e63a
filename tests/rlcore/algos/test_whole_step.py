"""The compiled whole-step path of PPO (`runtime.compile`): the eager update's numbers,
with nothing read from the device."""

import pytest
import torch

from rlcore.algos.config import GRPOConfig, PPOConfig
from rlcore.algos.grpo import GRPO
from rlcore.algos.ppo import PPO
from rlcore.algos.whole_step import DeviceAdam, WholeStep
from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.config import EnvConfig, ExperimentConfig, TrainerConfig
from rlcore.envs import CartPole, Pendulum
from rlcore.envs.gym_bridge import GymnasiumEnv
from rlcore.policies import Actor, ActorCritic, PolicyConfig
from rlcore.rollout import MASK, RolloutSpec, make_rollout, transition_view
from rlcore.trainer import Trainer
from tests.rlcore.resume import straight_and_resumed


def flat_params(policy):
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def pendulum_rollout(env=None):
    """A small Pendulum policy (or one for `env`), its rollout and a reset collector."""
    torch.manual_seed(0)
    env = env or Pendulum(8)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
    rollout = make_rollout(RolloutSpec.for_env(env, 16, with_value=True))
    collector = SyncCollector(env, policy, rollout, torch.Generator().manual_seed(1))
    collector.reset(seed=0)
    return policy, rollout, collector


def updated(cfg: PPOConfig, whole_step: bool, updates: int = 1, env=None):
    """The policy's parameters before and after `updates` PPO updates on fresh rollouts,
    the last update's metrics (as floats), and the PPO."""
    policy, rollout, collector = pendulum_rollout(env)
    ppo = PPO(policy, cfg, 4, torch.Generator().manual_seed(2), whole_step=whole_step)
    before = flat_params(policy)
    for _ in range(updates):
        collector.collect()
        metrics = ppo.update(rollout)
    return before, flat_params(policy), {k: float(v) for k, v in metrics.items()}, ppo


@pytest.mark.parametrize(
    "cfg",
    [
        PPOConfig(num_epochs=2, num_minibatches=4, microbatch_size=None, lr=3e-3),
        PPOConfig(num_epochs=3, num_minibatches=1, lr=3e-3, lr_schedule="linear"),
        PPOConfig(num_epochs=2, num_minibatches=2, lr=3e-3, lr_schedule="kl_adaptive"),
    ],
    ids=["shuffled", "one-minibatch-linear", "kl-adaptive"],
)
def test_the_whole_step_takes_the_eager_steps(cfg):
    before, eager, eager_metrics, _ = updated(cfg, whole_step=False, updates=2)
    _, fused, fused_metrics, _ = updated(cfg, whole_step=True, updates=2)
    assert not torch.allclose(before, eager, atol=1e-4)
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-4)
    assert fused_metrics.keys() == eager_metrics.keys()
    for key, value in eager_metrics.items():
        assert fused_metrics[key] == pytest.approx(value, rel=1e-3, abs=1e-6), key


def test_on_cpu_the_step_is_one_function_whose_gradients_autograd_never_wrote():
    """`torch.func` differentiates inside the one compiled function: the parameters'
    `.grad` (the autograd path's buffer) stay as the optimizer left them, zero."""
    cfg = PPOConfig(num_epochs=2, num_minibatches=4, microbatch_size=None, lr=3e-3)
    before, after, _, ppo = updated(cfg, whole_step=True)
    assert ppo.whole_step.one_function
    assert not torch.allclose(before, after, atol=1e-4)
    assert not ppo.optimizer.grads.buffer.any()


def test_a_whole_step_module_must_own_the_parameters_adam_steps():
    policy, _, _ = pendulum_rollout()
    other, _, _ = pendulum_rollout()
    ppo = PPO(policy, PPOConfig(), 4, torch.Generator().manual_seed(2), whole_step=True)
    with pytest.raises(ValueError, match="exactly the parameters Adam steps"):
        WholeStep(
            ppo._loss_terms, ppo.optimizer.device_adam, ppo.optimizer.grads, num_stats=6,
            normalize_advantage=True, max_grad_norm=None, target_kl=None, kl_index=0,
            graphs=False, module=other,
        )  # fmt: skip


@pytest.mark.parametrize("num_minibatches", [1, 4])
def test_the_whole_step_takes_the_eager_steps_over_an_envs_valid_steps_only(num_minibatches):
    # Gymnasium's next-step reset: a step per episode is no transition (masked). The whole
    # step covers the valid ones in the eager order, so the update is the eager one.
    cfg = PPOConfig(num_epochs=2, num_minibatches=num_minibatches, lr=3e-3)
    runs = []
    for whole_step in (False, True):
        env = GymnasiumEnv("CartPole-v1", 4)
        try:
            policy, rollout, collector = pendulum_rollout(env)
            ppo = PPO(policy, cfg, 4, torch.Generator().manual_seed(2), whole_step=whole_step)
            before = flat_params(policy)
            masked = 0
            for _ in range(3):
                collector.collect()
                masked += int((~transition_view(rollout)[MASK]).sum())
                metrics = ppo.update(rollout)
        finally:
            env.close()
        runs.append((before, flat_params(policy), {k: float(v) for k, v in metrics.items()}))
        assert masked > 0  # episodes ended: there were steps to leave out
    (before, eager, eager_metrics), (_, fused, fused_metrics) = runs
    assert not torch.allclose(before, eager, atol=1e-4)
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-4)
    for key, value in eager_metrics.items():
        assert fused_metrics[key] == pytest.approx(value, rel=1e-3, abs=1e-6), key


def test_target_kl_stops_on_the_device_after_the_same_minibatch():
    cfg = PPOConfig(num_epochs=4, num_minibatches=4, lr=1e-2, target_kl=2e-4)
    _, eager, eager_metrics, _ = updated(cfg, whole_step=False)
    _, fused, fused_metrics, _ = updated(cfg, whole_step=True)
    assert 1 <= eager_metrics["train/minibatches"] < 16  # it did stop early
    assert fused_metrics["train/minibatches"] == eager_metrics["train/minibatches"]
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-4)


def test_a_non_finite_loss_leaves_the_parameters_and_shows_in_the_losses():
    cfg = PPOConfig(num_epochs=2, num_minibatches=2, lr=1e-2)
    policy, rollout, collector = pendulum_rollout()
    collector.collect()
    rollout["value"][3, 5] = float("nan")  # a NaN value target: the value loss is NaN
    ppo = PPO(policy, cfg, 1, torch.Generator().manual_seed(2), whole_step=True)
    before = flat_params(policy)
    metrics = ppo.update(rollout)
    assert torch.isnan(metrics["loss/value"])
    assert metrics["train/minibatches"].item() == 1  # the failing step, counted, not applied
    torch.testing.assert_close(flat_params(policy), before, atol=0, rtol=0)


@pytest.mark.parametrize("compile_step", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("per_parameter", [False, True], ids=["flat", "per-parameter"])
def test_device_adam_takes_torch_adams_steps(per_parameter, compile_step):
    """Both gradient layouts, eager and compiled (where the bias corrections are written as
    exp(step * log(beta))), against torch's Adam over 300 steps, when bias correction
    matters and after; a disabled step leaves everything, even given a NaN gradient."""
    torch.manual_seed(0)
    shapes = [(5, 3), (3,), (2, 1, 4)]
    mine = [torch.nn.Parameter(torch.randn(shape)) for shape in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in mine]
    adam = DeviceAdam(mine, 3e-3, 1e-8)
    reference = torch.optim.Adam(theirs, lr=3e-3, eps=1e-8)

    def step(grads, enabled):
        adam.apply(grads if per_parameter else torch.cat([g.flatten() for g in grads]), enabled)

    step = torch.compile(step) if compile_step else step
    on, off = torch.ones((), dtype=torch.bool), torch.zeros((), dtype=torch.bool)
    for i in range(300):
        grads = [torch.randn(shape) * (i % 7 + 0.1) for shape in shapes]
        step(grads, on)
        for param, grad in zip(theirs, grads, strict=True):
            param.grad = grad
        reference.step()
        if i in (0, 1, 9, 299):
            for a, b in zip(mine, theirs, strict=True):
                torch.testing.assert_close(a.detach(), b.detach(), atol=1e-6, rtol=1e-5)
    before = [t.clone() for t in [*mine, *adam.state_tensors()]]
    step([torch.full(shape, float("nan")) for shape in shapes], off)
    for after, then in zip([*mine, *adam.state_tensors()], before, strict=True):
        torch.testing.assert_close(after.detach(), then.detach(), atol=0, rtol=0)


def test_device_adam_state_round_trips_through_torch_adam():
    cfg = PPOConfig(num_epochs=2, num_minibatches=2, lr=3e-3)
    _, _, _, fused = updated(cfg, whole_step=True)
    state = fused.state_dict()["optimizer"]["state"]
    adam = fused.optimizer.device_adam
    assert float(state[0]["step"]) == 4  # 2 epochs x 2 minibatches
    first = fused.optimizer.parameters[0]
    torch.testing.assert_close(state[0]["exp_avg"], adam.exp_avg[: first.numel()].view_as(first))
    copy = DeviceAdam(fused.optimizer.parameters, 1.0, 1e-8)
    copy.read_from(fused.optimizer.adam)
    for mine, theirs in zip(copy.state_tensors(), adam.state_tensors(), strict=True):
        torch.testing.assert_close(mine, theirs, atol=0, rtol=0)


def grpo_updated(cfg: GRPOConfig, whole_step: bool, updates: int = 2):
    """GRPO's parameters before and after `updates` updates on fresh grouped CartPole
    rollouts (masked transitions among them), and the last update's metrics as floats."""
    torch.manual_seed(0)
    env = CartPole(8)
    policy = Actor(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(16,)))
    rollout = make_rollout(RolloutSpec.for_env(env, 48, with_value=False, with_mask=True))
    generator = torch.Generator().manual_seed(1)
    collector = SyncCollector(env, policy, rollout, generator, GroupEpisodes(4))
    collector.reset(seed=0)
    grpo = GRPO(policy, cfg, 4, torch.Generator().manual_seed(2), whole_step=whole_step)
    before = flat_params(policy)
    for _ in range(updates):
        collector.collect()
        assert not rollout[MASK][:, :-1].all()
        metrics = grpo.update(rollout)
    return before, flat_params(policy), {k: float(v) for k, v in metrics.items()}


@pytest.mark.parametrize("num_minibatches", [3, 1])
def test_grpos_whole_step_takes_the_eager_steps_over_its_loss_mask(num_minibatches):
    cfg = GRPOConfig(num_epochs=2, num_minibatches=num_minibatches, kl_coef=0.1, lr=3e-3)
    before, eager, eager_metrics = grpo_updated(cfg, whole_step=False)
    _, fused, fused_metrics = grpo_updated(cfg, whole_step=True)
    assert not torch.allclose(before, eager, atol=1e-4)
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-4)
    assert fused_metrics.keys() == eager_metrics.keys()
    for key, value in eager_metrics.items():
        assert fused_metrics[key] == pytest.approx(value, rel=1e-3, abs=1e-6), key
    assert fused_metrics["train/minibatches"] == 2 * num_minibatches


def test_a_compiled_grpo_run_takes_whole_steps():
    cfg = ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=8),
        policy=PolicyConfig(hidden_sizes=(16,)),
        trainer=TrainerConfig(total_env_steps=8 * 32 * 2, num_steps=32, eval_every_iters=0),
        algorithm="grpo",
        algo=GRPOConfig(num_epochs=2, num_minibatches=2),
    )
    logged = []
    trainer = Trainer(cfg, sink=lambda step, metrics: logged.append(metrics), compile_loss=True)
    assert trainer.algo.whole_step is not None
    trainer.run()
    updates = [metrics for metrics in logged if "train/minibatches" in metrics]
    assert [metrics["train/minibatches"] for metrics in updates] == [4.0, 4.0]
    assert all(isinstance(value, float) for value in updates[-1].values())
    assert 0 < updates[-1]["stats/loss_fraction"] <= 1


def test_a_compiled_run_resumes_bit_identically(tmp_path):
    cfg = ExperimentConfig(
        env=EnvConfig("pendulum", num_envs=8),
        policy=PolicyConfig(hidden_sizes=(16,)),
        trainer=TrainerConfig(total_env_steps=8 * 32 * 5, num_steps=32, eval_every_iters=0),
        algo=PPOConfig(num_epochs=2, num_minibatches=2, lr_schedule="kl_adaptive"),
    )

    straight, resumed = straight_and_resumed(
        cfg, tmp_path / "ckpt.pt", 2, compile_loss=True, sync_every=3
    )
    assert resumed.iteration == straight.iteration == 5
    assert torch.equal(flat_params(resumed.policy), flat_params(straight.policy))
    adams = straight.algo.optimizer.device_adam, resumed.algo.optimizer.device_adam
    assert torch.equal(adams[0].lr, adams[1].lr)  # the adapted rate came back too
    assert torch.equal(adams[0].exp_avg_sq, adams[1].exp_avg_sq)


def test_trainers_of_many_sizes_in_one_process_all_step_compiled():
    # A search's trials differ in N and minibatch size; one graph per size would reach
    # torch's recompile limit (8) and leave later trials eager without a word. Sizes turn
    # dynamic at the second size instead, so one more graph serves all of them.
    from torch._dynamo.utils import counters

    def trained(num_envs: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        cfg = ExperimentConfig(
            env=EnvConfig("cartpole", num_envs=num_envs),
            policy=PolicyConfig(hidden_sizes=(16, 16)),
            trainer=TrainerConfig(total_env_steps=num_envs * 16, num_steps=16, eval_every_iters=0),
            algo=PPOConfig(num_epochs=1, num_minibatches=2),
        )
        graphs = counters["stats"]["unique_graphs"]
        trainer = Trainer(cfg, compile_loss=True, sync_every=10)
        before = flat_params(trainer.policy)
        trainer._train_iteration()
        trainer.flush()
        return counters["stats"]["unique_graphs"] - graphs, before, flat_params(trainer.policy)

    sizes = [9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29]  # sizes no other test compiles
    new_graphs = []
    for num_envs in sizes:
        graphs, before, after = trained(num_envs)
        new_graphs.append(graphs)
        assert (after - before).abs().max() > 1e-5  # every trainer learnt
    # The first two sizes may compile (static, then dynamic); none after them.
    assert sum(new_graphs[2:]) == 0
    assert sum(new_graphs) <= 6


@pytest.mark.parametrize(
    ("compiled", "options", "invalid_steps"),
    [(False, {}, True), (True, {}, True), (True, {"autoreset": "same-step"}, False)],
    ids=["eager", "compiled", "compiled-same-step"],
)
def test_a_compiled_run_on_gymnasium_keeps_the_envs_reset_and_takes_the_whole_step(
    compiled, options, invalid_steps
):
    # Compiling changes the update, never the env: Gymnasium's default (next-step) reset
    # stays, and its masked steps are left out of the whole step's minibatches as of eager ones.
    cfg = ExperimentConfig(
        env=EnvConfig("gymnasium:CartPole-v1", num_envs=4, options=options),
        policy=PolicyConfig(hidden_sizes=(16,)),
        trainer=TrainerConfig(total_env_steps=4 * 64 * 2, num_steps=64, eval_every_iters=0),
        algo=PPOConfig(num_epochs=1, num_minibatches=2),
    )
    trainer = Trainer(cfg, compile_loss=compiled, sync_every=10)
    try:
        assert trainer.env.has_invalid_steps is invalid_steps
        assert (trainer.algo.whole_step is not None) is compiled
        before = flat_params(trainer.policy)
        result = trainer.run()
        assert result.env_steps == 4 * 64 * 2
        assert (flat_params(trainer.policy) - before).abs().max() > 1e-5
    finally:
        trainer.env.close()
