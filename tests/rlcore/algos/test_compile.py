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


def _planned(steps: int, **changes) -> ExperimentConfig:
    """A PPO run of `steps` env steps (8 envs x 16 steps an iteration, 4 x 4 minibatch steps
    an update: 128 env steps buy 16 minibatch steps)."""
    trainer = {"total_env_steps": steps, "num_steps": 16, **changes.pop("trainer", {})}
    return ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=8),
        trainer=TrainerConfig(**trainer),
        algo=PPOConfig(num_epochs=4, num_minibatches=4, **changes),
    )


def test_auto_compiles_ppo_runs_long_enough_to_pay_back_compiling():
    from rlcore.algos.compile import compile_pays
    from rlcore.algos.config import AUTO_COMPILE_MIN_STEPS

    iterations = AUTO_COMPILE_MIN_STEPS // 16  # 16 minibatch steps an iteration
    assert compile_pays(_planned(128 * iterations)) == (
        True, f"{AUTO_COMPILE_MIN_STEPS:,d} minibatch steps planned"
    )  # fmt: skip
    compiled, why = compile_pays(_planned(128 * (iterations - 1)))
    assert not compiled and why.startswith(f"{AUTO_COMPILE_MIN_STEPS - 16:,d} minibatch steps")
    long = 128 * iterations
    for cfg, reason in [
        (_planned(long, trainer={"stop_at_eval_return": 475.0}), "a stop target"),
        (_planned(long, microbatch_size=32), "explicit micro-batches"),
        (ExperimentConfig(EnvConfig("pendulum"), algorithm="grpo", algo=GRPOConfig()), "only PPO"),
    ]:
        compiled, why = compile_pays(cfg)
        assert not compiled and reason in why
    compiled, why = compile_pays(_planned(long), world_size=2)
    assert not compiled and "several processes" in why


def _planned_sac(steps: int, precision: str = "float32", device: str = "cpu", **trainer):
    """A SAC run of `steps` env steps: 1,000 warm-up steps, then one update per env step."""
    from rlcore.algos.sac_config import SACConfig
    from rlcore.config import ReplayConfig

    return ExperimentConfig(
        env=EnvConfig("pendulum", num_envs=1, device=device),
        trainer=TrainerConfig(total_env_steps=steps, num_steps=1, **trainer),
        algorithm="sac",
        algo=SACConfig(precision=precision),
        replay=ReplayConfig(warmup_steps=1_000, updates_per_step=1.0),
    )


@pytest.mark.parametrize(
    ("precision", "device"), [("float32", "cpu"), ("bfloat16", "cpu"), ("float32", "cuda")]
)
def test_auto_leaves_sac_eager_however_long_the_run(precision, device):
    """Compiled SAC returned less than eager on fresh HumanoidStandup seeds (benchmarks/
    README.md, *suite*): `auto` never compiles it, whatever the run's length."""
    from rlcore.algos.compile import SAC_STAYS_EAGER, compile_pays

    assert compile_pays(_planned_sac(1_000_000, precision, device)) == (False, SAC_STAYS_EAGER)


def test_auto_stays_eager_without_a_compiler(monkeypatch):
    from rlcore.algos.compile import compile_pays
    from rlcore.algos.config import AUTO_COMPILE_MIN_STEPS

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert compile_pays(_planned(128 * AUTO_COMPILE_MIN_STEPS)) == (
        False, "runtime.compile on CPU needs a C++ compiler (g++ or clang++ on PATH"
    )  # fmt: skip


def test_compiled_functions_keep_compiling_past_torchs_default_of_eight_graphs():
    # One process may train many architectures in turn (a search over network sizes, a
    # suite of tasks): each is a graph of its own. Past torch's default limit (8) the
    # function would run eager, with only a logged warning.
    from torch._dynamo.utils import counters

    from rlcore.algos.compile import RECOMPILE_LIMIT, compiled

    def layer(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ weight)

    step = compiled(layer, backend="eager", dynamic=False)  # a new shape: a new graph
    graphs = counters["stats"]["unique_graphs"]
    for width in range(3, 15):  # 12 architectures
        weight = torch.ones(width, 2)
        assert torch.equal(step(weight, torch.ones(1, width)), torch.tanh(torch.ones(1, 2) * width))
    assert counters["stats"]["unique_graphs"] - graphs == 12
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT
