"""Task families and the preset an experiment's unset keys come from."""

import dataclasses
import math

import pytest
import torch

from rlcore.config import PolicyConfig
from rlcore.errors import ConfigError
from rlcore.presets import (
    CONTINUOUS_CLASSIC,
    DISCRETE_CLASSIC,
    MANIPULATION,
    MUJOCO_LOCOMOTION,
    PRESETS,
    PRESETS_BY_ALGORITHM,
    SAC_PRESETS,
    choose_preset,
    env_family,
    experiment_for,
    preset,
)
from rlcore.presets_cuda import CUDA_PRESETS
from rlcore.trainer import Trainer
from tests.rlcore.algos.plugins.ppo_variant import UNDECLARED, PPOVariantConfig, registered


@pytest.mark.parametrize(
    ("env_name", "family"),
    [
        ("cartpole", DISCRETE_CLASSIC),
        ("gymnasium:Acrobot-v1", DISCRETE_CLASSIC),
        ("gymnasium:MountainCarContinuous-v0", CONTINUOUS_CLASSIC),
        ("pendulum", CONTINUOUS_CLASSIC),
        ("mujoco:Ant", MUJOCO_LOCOMOTION),
        ("gymnasium:Walker2d-v5", MUJOCO_LOCOMOTION),
        ("gymnasium:my_pkg.envs:Hopper-v5", MUJOCO_LOCOMOTION),  # a module prefix is skipped
        ("push_cube", MANIPULATION),
        ("gymnasium:FrozenLake-v1", None),
    ],
)
def test_families_are_told_by_name(env_name, family):
    assert env_family(env_name) == family


def test_auto_prefers_the_envs_own_preset_then_its_family_then_the_library():
    own = choose_preset("auto", "mujoco:HalfCheetah", "sac")
    assert own.config is SAC_PRESETS["mujoco_halfcheetah"] and not own.generic
    tuned = choose_preset("auto", "gymnasium:HalfCheetah-v5", "ppo")
    assert tuned.config is PRESETS["gym_halfcheetah"] and not tuned.generic
    assert choose_preset("auto", "gymnasium:Hopper-v5", "ppo").config is PRESETS["gym_hopper"]
    family = choose_preset("auto", "mujoco:Walker2d", "ppo")
    assert family.config is PRESETS["gym_locomotion"] and family.generic
    assert "MuJoCo locomotion" in family.description
    library = choose_preset("auto", "cartpole", "sac")  # no SAC for discrete actions
    assert library.config is None and "no sac defaults" in library.description


@pytest.mark.parametrize("algorithm", sorted(PRESETS_BY_ALGORITHM))
def test_each_env_has_at_most_one_preset_per_algorithm_and_kind_of_device(algorithm):
    """`auto` picks the preset whose env is `env.name` (on a GPU, its GPU preset): two would
    make the pick arbitrary (a family's settings once shadowed Hopper-v5's tuned preset)."""
    table = PRESETS_BY_ALGORITHM[algorithm].values()
    envs = [(cfg.env.name, cfg.env.device == "cpu") for cfg in table]
    assert len(envs) == len(set(envs))
    assert all(cfg.env.device in ("cpu", "cuda") for cfg in table)


def test_named_presets_are_looked_up_per_algorithm():
    assert choose_preset("pendulum", "cartpole", "sac").config is SAC_PRESETS["pendulum"]
    assert choose_preset("none", "push_cube", "ppo").config is None
    with pytest.raises(ValueError, match="unknown preset 'gym_cartpole' for sac"):
        choose_preset("gym_cartpole", "cartpole", "sac")


def test_an_algorithm_of_your_own_takes_the_presets_it_declares(monkeypatch):
    """`presets_from="ppo"`: PPO's presets, and of their algorithm settings those the
    variant's config has by name (push_cube's lr 1e-3 and 8 minibatches; its reward_scale
    and clip settings are PPO's alone; mirror_coef, the variant's own, keeps its default)."""
    name = registered(monkeypatch)
    tuned = PRESETS["push_cube"]
    chosen = choose_preset("push_cube", "cartpole", name)
    assert (
        chosen.config is tuned and chosen.description == "preset push_cube (ppo's, for ppo_variant)"
    )
    assert choose_preset("auto", "push_cube", name).config is tuned  # the env's own
    for cfg in (experiment_for("push_cube", name), experiment_for("pendulum", name, "push_cube")):
        assert cfg.algorithm == name
        assert cfg.algo == PPOVariantConfig(lr=1e-3, gamma=0.99, num_epochs=10, num_minibatches=8)
        assert cfg.policy == tuned.policy and cfg.replay == tuned.replay
    assert experiment_for("push_cube", name).trainer == tuned.trainer
    family = experiment_for("gymnasium:Walker2d-v5", name)  # the MuJoCo family's PPO settings
    assert family.algo.lr == PRESETS["gym_locomotion"].algo.lr == 0.0003586780765804471
    assert family.algo.num_minibatches == 32 and family.algo.num_epochs == 12


def test_an_algorithm_that_declares_no_presets_takes_none(monkeypatch):
    name = registered(monkeypatch, UNDECLARED)
    with pytest.raises(ValueError) as err:
        choose_preset("push_cube", "push_cube", name)
    assert str(err.value) == (
        "'push_cube': algorithm ppo_undeclared takes no presets; declare whose it takes where "
        "it registers, AlgorithmSpec(..., presets_from='ppo'), or write preset: none"
    )
    library = experiment_for("push_cube", name)  # auto: the library's defaults
    assert library.algo == PPOVariantConfig() and library.policy == PolicyConfig()
    assert "ppo_undeclared takes no presets" in choose_preset("auto", "push_cube", name).description
    typo = registered(monkeypatch, dataclasses.replace(UNDECLARED, name="typo", presets_from="dqn"))
    with pytest.raises(ValueError, match=r"presets_from must be one of \['ppo', 'grpo', 'sac'\]"):
        choose_preset("auto", "push_cube", typo)


ALL_PRESETS = [
    (algorithm, name) for algorithm, table in PRESETS_BY_ALGORITHM.items() for name in sorted(table)
]


@pytest.mark.parametrize(("algorithm", "name"), ALL_PRESETS)
def test_every_preset_builds_and_trains_an_iteration(algorithm, name):
    """A preset is code nothing else runs in CI: each must build, collect, update and
    evaluate (one iteration, or as many as one gradient step needs, and one evaluation
    episode) with finite losses."""
    cfg = preset(name, algorithm)
    if cfg.env.device.startswith("cuda") and not torch.cuda.is_available():  # on the CPU,
        # with fewer envs (4,096 MuJoCo envs would take most of this test's time)
        env = dataclasses.replace(cfg.env, device="cpu", num_envs=min(cfg.env.num_envs, 64))
        cfg = dataclasses.replace(cfg, env=env)
    iteration = cfg.env.num_envs * cfg.trainer.num_steps
    iterations = 1
    if cfg.replay is not None:  # enough iterations for one gradient step (half one per env step)
        iterations = math.ceil(1 / (iteration * cfg.replay.updates_per_step))
    cfg = dataclasses.replace(
        cfg,
        trainer=dataclasses.replace(
            cfg.trainer,
            total_env_steps=iterations * iteration,
            eval_episodes=1,
            checkpoint_every_iters=0,
        ),
    )
    if cfg.replay is not None:  # updates start after the warm-up: no warm-up
        cfg = dataclasses.replace(cfg, replay=dataclasses.replace(cfg.replay, warmup_steps=0))
    metrics: dict[str, float] = {}
    trainer = Trainer(cfg, sink=lambda step, values: metrics.update(values))
    try:
        trainer.run()
    finally:
        trainer.env.close()
        trainer.eval_env.close()
    assert trainer.iteration == iterations and trainer.env_steps == iterations * iteration
    losses = {key: value for key, value in metrics.items() if key.startswith("loss/")}
    assert losses and all(math.isfinite(value) for value in losses.values())
    assert math.isfinite(trainer.last_eval["eval/episode_return"])


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
@pytest.mark.parametrize("name", sorted(CUDA_PRESETS))
def test_a_cuda_preset_without_cuda_is_one_line_naming_env_device(name):
    with pytest.raises(
        ConfigError, match=r"^env\.device 'cuda': CUDA is not available .*use 'cpu'$"
    ):
        Trainer(preset(name))


def test_auto_takes_the_envs_gpu_preset_on_an_accelerator_and_its_cpu_one_elsewhere():
    assert choose_preset("auto", "cartpole", "ppo").config is PRESETS["cartpole"]
    gpu = choose_preset("auto", "cartpole", "ppo", device="cuda:1")
    assert gpu.config is PRESETS["cuda_cartpole"] and gpu.description.endswith("on cuda:1")
    assert choose_preset("auto", "push_cube", "ppo", "cuda").config is PRESETS["cuda_push_cube"]
    # No GPU preset for the env (or the algorithm): its own preset, as on a CPU.
    assert choose_preset("auto", "pendulum", "ppo", "cuda").config is PRESETS["pendulum"]
    assert choose_preset("auto", "push_cube", "sac", "cuda").config is SAC_PRESETS["push_cube"]
    # A GPU preset is never the CPU's choice, even for an env only a GPU preset names.
    assert choose_preset("auto", "cartpole", "ppo", "cpu").config is not PRESETS["cuda_cartpole"]
