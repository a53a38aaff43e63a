"""`precision: bfloat16` for PPO and GRPO: bf16 hidden-layer products in the update only."""

from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rlcore.precision
from rlcore.algos.config import GRPOConfig, PPOConfig
from rlcore.algos.grpo import GRPO
from rlcore.algos.ppo import PPO
from rlcore.envs import Pendulum
from rlcore.policies import Actor, ActorCritic, PolicyConfig
from rlcore.presets import PRESETS
from rlcore.trainer import Trainer
from tests.rlcore.algos.test_whole_step import flat_params, grpo_updated, updated


class ProductDtypes(TorchDispatchMode, list):
    """The dtype of each matrix product (`aten.addmm`) run inside it, as autocast left it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.addmm.default:
            self.append(out.dtype)
        return out


CFG = PPOConfig(num_epochs=2, num_minibatches=2, microbatch_size=None, lr=3e-3)


def test_under_autocast_the_hidden_layers_multiply_in_bf16_and_the_heads_in_float32():
    torch.manual_seed(0)
    env = Pendulum(4)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(64, 64)))
    obs, action = torch.randn(32, env.obs_dim), torch.randn(32, 1)
    exact = policy.evaluate(obs, action)
    with ProductDtypes() as products, rlcore.precision.update_autocast(True, torch.device("cpu")):
        mixed = policy.evaluate(obs, action)
    # Actor, then critic: two hidden layers in bf16, the head in float32.
    assert products == 2 * [torch.bfloat16, torch.bfloat16, torch.float32]
    assert mixed.log_prob.dtype == mixed.value.dtype == torch.float32
    assert not torch.equal(mixed.log_prob, exact.log_prob)  # bf16 products did run
    # bf16 keeps ~3 significant digits of the hidden features; the heads add no rounding.
    torch.testing.assert_close(mixed.value, exact.value, rtol=0, atol=0.02)
    torch.testing.assert_close(mixed.log_prob, exact.log_prob, rtol=0, atol=0.02)


def test_a_bf16_ppo_update_moves_the_float32_parameters_as_float32_does():
    before, exact, exact_metrics, _ = updated(CFG, whole_step=False, updates=2)
    _, mixed, mixed_metrics, ppo = updated(
        replace(CFG, precision="bfloat16"), whole_step=False, updates=2
    )
    assert ppo._bf16 and all(p.dtype == torch.float32 for p in ppo.policy.parameters())
    assert not torch.equal(mixed, exact)
    assert (mixed - exact).abs().max() < 0.1 * (exact - before).abs().max()
    for key in ("loss/policy", "loss/value", "stats/approx_kl"):
        assert mixed_metrics[key] == pytest.approx(exact_metrics[key], rel=0.1, abs=1e-3), key


def test_the_compiled_bf16_step_takes_the_eager_bf16_steps():
    """To bf16's rounding: Inductor may round the fused products' sums at other points."""
    cfg = replace(CFG, precision="bfloat16")
    before, eager, eager_metrics, _ = updated(cfg, whole_step=False, updates=2)
    _, fused, fused_metrics, _ = updated(cfg, whole_step=True, updates=2)
    assert (fused - eager).abs().max() < 0.02 * (eager - before).abs().max()
    for key, value in eager_metrics.items():
        assert fused_metrics[key] == pytest.approx(value, rel=1e-2, abs=1e-4), key


def test_a_bf16_grpo_update_moves_the_parameters_as_float32_does():
    cfg = GRPOConfig(num_epochs=2, num_minibatches=2, kl_coef=0.1, lr=3e-3)
    before, exact, _ = grpo_updated(cfg, whole_step=False)
    _, mixed, _ = grpo_updated(replace(cfg, precision="bfloat16"), whole_step=False)
    assert not torch.equal(mixed, exact)
    assert (mixed - exact).abs().max() < 0.1 * (exact - before).abs().max()


def test_ppo_solves_cartpole_with_bf16_products():
    cfg = PRESETS["cartpole"]
    algo = replace(cfg.algo, precision="bfloat16")
    cfg = replace(cfg, algo=algo, trainer=replace(cfg.trainer, total_env_steps=150_000))
    trainer = Trainer(cfg)
    assert trainer.algo._bf16
    result = trainer.run()
    assert result.reached_target, result
    assert result.eval_metrics["eval/episode_return"] >= 475


@pytest.mark.parametrize(("config", "section"), [(PPOConfig, "ppo"), (GRPOConfig, "grpo")])
def test_precision_must_be_float32_bfloat16_or_auto(config, section):
    with pytest.raises(ValueError, match=rf"{section}\.precision must be one of"):
        config(precision="float16")


@pytest.mark.parametrize(("flags", "mixed"), [({"avx512_bf16"}, True), ({"avx2"}, False)])
def test_auto_precision_multiplies_bf16_where_the_cpu_does_natively(monkeypatch, flags, mixed):
    monkeypatch.setattr(rlcore.precision, "_cpu_flags", lambda: frozenset(flags))
    torch.manual_seed(0)
    env = Pendulum(4)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    ppo = PPO(policy, PPOConfig(precision="auto"), 1, torch.Generator())
    assert ppo._bf16 is mixed
    assert flat_params(policy).dtype == torch.float32
    actor = Actor(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    assert GRPO(actor, GRPOConfig(precision="auto"), 1, torch.Generator())._bf16 is mixed


def test_under_bf16_the_old_log_probs_are_re_evaluated_so_every_ratio_starts_at_one():
    """The collector acts in float32; the update's first step must not see bf16's rounding
    as a policy change (a clipped ratio, a KL)."""
    one_step = PPOConfig(num_epochs=1, num_minibatches=1, microbatch_size=None, lr=3e-3)
    *_, exact_metrics, _ = updated(one_step, whole_step=False)
    *_, mixed_metrics, _ = updated(replace(one_step, precision="bfloat16"), whole_step=False)
    assert exact_metrics["stats/approx_kl"] == pytest.approx(0, abs=1e-9)
    assert mixed_metrics["stats/approx_kl"] == pytest.approx(0, abs=1e-9)
    assert mixed_metrics["stats/clip_fraction"] == 0
