"""A training iteration on the fast path (`compile_loss`, builtin envs, metrics read every
`sync_every` iterations) never reads the device (issue P19's sync-free hot loop)."""

import contextlib

import pytest
import torch

from rlcore.algos.ppo import PPOConfig
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig, TrainerConfig
from rlcore.errors import NonFiniteError
from rlcore.trainer import Trainer

# Every way a tensor's values reach Python.
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@contextlib.contextmanager
def counting_host_reads():
    """Count calls of `HOST_READS` on any tensor (on a GPU each is a sync)."""
    calls: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def counted(name):
        original = originals[name]

        def wrapper(self, *args, **kwargs):
            calls.append(name)
            return original(self, *args, **kwargs)

        return wrapper

    for name in HOST_READS:
        setattr(torch.Tensor, name, counted(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def fast_config(env: str, **algo) -> ExperimentConfig:
    return ExperimentConfig(
        env=EnvConfig(env, num_envs=8),
        policy=PolicyConfig(hidden_sizes=(16, 16), normalize_obs=False),
        # Pendulum's 200-step time limit ends episodes inside the second rollout.
        trainer=TrainerConfig(total_env_steps=8 * 128 * 4, num_steps=128, eval_every_iters=0),
        algo=PPOConfig(num_epochs=2, num_minibatches=2, **algo),
    )


@pytest.mark.parametrize(
    "algo",
    [{}, {"target_kl": 0.01, "lr_schedule": "kl_adaptive"}, {"lr_schedule": "linear"}],
    ids=["plain", "target-kl", "linear"],
)
@pytest.mark.parametrize("env", ["pendulum", "cartpole"])
def test_an_iteration_reads_nothing_from_the_device(env, algo):
    logged = []
    trainer = Trainer(
        fast_config(env, **algo),
        sink=lambda step, metrics: logged.append((step, metrics)),
        compile_loss=True,
        sync_every=100,
    )
    trainer._train_iteration()  # compiles
    with counting_host_reads() as calls:
        trainer._train_iteration()
        trainer._train_iteration()
    assert calls == []
    assert logged == []  # nothing read yet
    trainer.flush()
    assert [step for step, _ in logged] == [8 * 128, 2 * 8 * 128, 3 * 8 * 128]
    last = logged[-1][1]
    assert all(isinstance(value, float) for value in last.values())
    assert last["train/minibatches"] >= 1
    if env == "pendulum":  # episodes of 200 steps ended in the second and third rollouts
        assert logged[1][1]["train/episodes"] == 8
        assert -2000 < logged[1][1]["train/episode_return"] < 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_an_iteration_on_cuda_makes_no_sync():
    cfg = fast_config("cartpole")
    cfg = ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=8, device="cuda"),
        policy=cfg.policy,
        trainer=cfg.trainer,
        algo=cfg.algo,
    )
    trainer = Trainer(cfg, compile_loss=True, sync_every=100)
    trainer._train_iteration()  # compiles and captures
    assert trainer.collector.graph_captured  # the steps replay as one CUDA graph
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer._train_iteration()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_a_non_finite_env_output_found_at_the_next_read_names_its_iteration():
    trainer = Trainer(fast_config("pendulum"), compile_loss=True, sync_every=100)
    trainer._train_iteration()
    original = trainer.env.step

    def poisoned(action, slot):
        original(action, slot)
        slot.reward.fill_(float("nan"))

    trainer.env.step = poisoned
    trainer._train_iteration()
    with pytest.raises(NonFiniteError, match="non-finite reward in iteration 2"):
        trainer.flush()


@pytest.mark.parametrize(
    ("env", "steps_on_host"),
    [
        ("cartpole", False),
        ("mujoco:HalfCheetah", True),  # mujoco.batch: numpy on the host
        ("gymnasium:Pendulum-v1", True),
    ],
)
def test_host_checks_stay_where_the_env_steps_on_the_host(env, steps_on_host):
    """The fast path drops the collector's host checks only for envs that live on the
    device: where each step passes through the host anyway, a check is no sync, and it saves
    the critic's forward over the final observations at every step."""
    eager = Trainer(fast_config(env))
    compiled = Trainer(fast_config(env), compile_loss=True)
    assert eager.env.steps_on_host is compiled.env.steps_on_host is steps_on_host
    assert eager.collector.host_checks
    assert compiled.collector.host_checks is steps_on_host
