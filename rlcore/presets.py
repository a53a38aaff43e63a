"""Tuned experiment configurations for the builtin tasks (the benchmarks' and CLI's defaults).

Longer than the 400 lines a module is kept to, on purpose: it is one table of data (each
preset with the reason it holds its values) plus the few lines that choose among them
(`preset: auto`); split by task family, the choice would read across files.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from rlcore.algos.config import GRPOConfig, PPOConfig
from rlcore.algos.registry import algorithm_spec
from rlcore.algos.sac_config import SACConfig
from rlcore.config import (
    GYMNASIUM_PREFIX,
    MUJOCO_PREFIX,
    EnvConfig,
    ExperimentConfig,
    PolicyConfig,
    ReplayConfig,
    TrainerConfig,
)
from rlcore.family_split import split_by_traits
from rlcore.presets_cuda import CUDA_PRESETS

# ReLU rather than tanh: on CPU torch's tanh kernel costs many times ReLU's at these sizes,
# and it is the single largest cost of a small-MLP PPO update.
PRESETS: dict[str, ExperimentConfig] = {
    "cartpole": ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=32),
        policy=PolicyConfig(hidden_sizes=(64, 64), activation="relu"),
        algo=PPOConfig(lr=1e-3, num_epochs=5, num_minibatches=4),
        trainer=TrainerConfig(
            total_env_steps=200_000, num_steps=64, eval_every_iters=2, stop_at_eval_return=475
        ),
    ),
    "pendulum": ExperimentConfig(
        env=EnvConfig("pendulum", num_envs=64),
        policy=PolicyConfig(activation="tanh", normalize_obs=True, init_log_std=-0.5),
        algo=PPOConfig(lr=1e-3, gamma=0.95, reward_scale=0.1, num_epochs=10, num_minibatches=8),
        trainer=TrainerConfig(
            total_env_steps=2_000_000, num_steps=64, eval_every_iters=5, stop_at_eval_return=-250
        ),
    ),
    "push_cube": ExperimentConfig(
        env=EnvConfig("push_cube", num_envs=64),
        policy=PolicyConfig(activation="relu", normalize_obs=True, init_log_std=-0.5),
        algo=PPOConfig(lr=1e-3, gamma=0.99, reward_scale=0.1, num_epochs=10, num_minibatches=8),
        trainer=TrainerConfig(
            total_env_steps=3_000_000,
            num_steps=64,
            eval_every_iters=5,
            eval_episodes=64,
            checkpoint_every_iters=50,  # the pipeline's resumable progress, every ~200k steps
            stop_at_eval_success=0.9,
        ),
    ),
}

# The camera task (push_cube_pixels): the actor sees the 48x48 image (a spatial-keypoint
# encoder: where the small objects are) and its own proprioception; the critic reads the
# privileged state, so no second CNN, and the actor's image features also learn to predict
# that state (aux_obs: without it the return plateaued with no success). PushCube's settings
# otherwise, with 4 epochs of 4 minibatches: the encoder's backward is most of an update, and
# 10 x 8 learnt no faster per env step. Every seed tried reaches success 0.9, in minutes on a
# 2-core CPU (benchmarks/pixel_push_cube.py; figures: benchmarks/README.md, *observations*).
PRESETS["push_cube_pixels"] = dataclasses.replace(
    PRESETS["push_cube"],
    env=EnvConfig("push_cube_pixels", num_envs=64),
    policy=dataclasses.replace(
        PRESETS["push_cube"].policy,
        encoders={"image": "spatial"},
        image_features=32,
        critic_obs=("privileged",),
        aux_obs=("privileged",),
    ),
    algo=dataclasses.replace(PRESETS["push_cube"].algo, num_epochs=4, num_minibatches=4),
)

# Gymnasium's own CartPole-v1 through the bridge (rlcore.envs.gym_bridge), on Gymnasium's
# numpy-vectorised CartPoleVectorEnv, with RL Zoo's CartPole settings (8 envs x 32 steps, one
# minibatch, 20 epochs, gamma 0.98, GAE 0.8, the learning rate decaying linearly; its clip
# range also decays, ours stays 0.2) at twice its learning rate, 2e-3: it solves in about half
# the env steps of RL Zoo's 1e-3 and fewer than SB3 with RL Zoo's settings, at the same cost
# per step. On a slow env, env steps are what wall time is made of. Figures:
# benchmarks/README.md, *solve_time* ("gym_cartpole: Gymnasium CartPole-v1 through the
# bridge, at twice RL Zoo's learning rate").
PRESETS["gym_cartpole"] = ExperimentConfig(
    env=EnvConfig(
        "gymnasium:CartPole-v1", num_envs=8, options={"vectorization": "vector_entry_point"}
    ),
    policy=PolicyConfig(hidden_sizes=(64, 64), activation="tanh"),
    algo=PPOConfig(
        lr=2e-3,
        lr_schedule="linear",
        gamma=0.98,
        gae_lambda=0.8,
        num_epochs=20,
        num_minibatches=1,
    ),
    trainer=TrainerConfig(
        total_env_steps=200_000, num_steps=32, eval_every_iters=4, stop_at_eval_return=475
    ),
)
# Discrete classic control on Gymnasium, here Acrobot-v1: the cartpole preset's batch (32
# envs x 64 steps, lr 1e-3) learnt with a 128x128 network in 10 epochs of 8 minibatches, 4x
# its gradient steps per batch: sample-efficient where env steps are the cost, and still a
# fraction of SB3's CPU. The family's defaults (what a discrete Gymnasium classic-control env
# without a preset of its own gets). At 300k env steps on Acrobot it returns more than the
# cartpole preset's settings on the seeds it was chosen on, and more than SB3's defaults on
# those and on fresh ones (benchmarks/README.md, *env_defaults*).
PRESETS["gym_acrobot"] = ExperimentConfig(
    env=EnvConfig("gymnasium:Acrobot-v1", num_envs=32),
    policy=PolicyConfig(hidden_sizes=(128, 128), activation="relu"),
    algo=PPOConfig(lr=1e-3, num_epochs=10, num_minibatches=8),
    trainer=TrainerConfig(total_env_steps=300_000, num_steps=64, eval_every_iters=10),
)
# The MuJoCo family's defaults (what a Gymnasium MuJoCo env without a preset of its own gets), here
# on Walker2d, which has none (each env has at most one preset per kind of device: `auto` finds it
# by name). Chosen by the platform's study across tasks (search/mujoco_family-ppo.yaml): of its
# trials so far, the best mean normalised score on Ant, Walker2d and Swimmer, and level with the
# earlier family settings on the held-out InvertedPendulum, InvertedDoublePendulum, Reacher and
# Pusher (benchmarks/README.md, *suite*). They are the settings the Hopper study found
# (search/mujoco_hopper-ppo.yaml, trial 34): tanh 64x64, normalised observations, log-std -0.57, 8
# envs x 256 steps, 12 epochs of 32 minibatches, gamma 0.995, GAE 0.946, lr 3.59e-4 decaying
# linearly, rewards x 0.1, smaller value and gradient-norm coefficients.
PRESETS["gym_locomotion"] = ExperimentConfig(
    env=EnvConfig("gymnasium:Walker2d-v5", num_envs=8),
    # The trial's values exactly as sampled (rounding them would change every run's bits).
    policy=PolicyConfig(activation="tanh", normalize_obs=True, init_log_std=-0.5656209203737406),
    algo=PPOConfig(
        lr=0.0003586780765804471,
        lr_schedule="linear",
        gamma=0.995,
        gae_lambda=0.945692241301083,
        ent_coef=9.445265948604407e-07,
        vf_coef=0.4604650746874652,
        max_grad_norm=0.5995466977995941,
        reward_scale=0.1,
        num_epochs=12,
        num_minibatches=32,
    ),
    trainer=TrainerConfig(
        total_env_steps=1_000_000, num_steps=256, eval_every_iters=50, eval_episodes=10
    ),
)
# Hopper, natively: the same settings (the Hopper study's best trial). At 1M env steps every
# seed the study never used passes a return of 3,200, natively and through the Gymnasium
# bridge (benchmarks/README.md, *env_defaults*, "Hopper at 1M env steps").
PRESETS["mujoco_hopper"] = dataclasses.replace(
    PRESETS["gym_locomotion"], env=EnvConfig("mujoco:Hopper", num_envs=8, options={"nthread": 1})
)
# The same experiment on Gymnasium's Hopper-v5 through the bridge.
PRESETS["gym_hopper"] = dataclasses.replace(
    PRESETS["mujoco_hopper"], env=EnvConfig("gymnasium:Hopper-v5", num_envs=8)
)
# HalfCheetah: RL Zoo's tuned PPO (ReLU 256x256, log-std -2, observation and return
# normalisation, gamma 0.98, GAE 0.92, clip 0.1, lr 2.06e-5 constant, 20 epochs, its entropy
# and value coefficients) with its 512 env steps per iteration batched as 8 envs x 64 steps
# and learnt from in 4 minibatches of 128 (RL Zoo: 1 env x 512, 8 of 64). At 1M env steps
# the mean return passes 5,000 natively and through the bridge, natively in under half the
# wall time of SB3 PPO with RL Zoo's settings (benchmarks/README.md, *halfcheetah*).
PRESETS["mujoco_halfcheetah"] = ExperimentConfig(
    env=EnvConfig("mujoco:HalfCheetah", num_envs=8, options={"nthread": 1}),
    policy=PolicyConfig(
        hidden_sizes=(256, 256), activation="relu", init_log_std=-2.0, normalize_obs=True
    ),
    algo=PPOConfig(
        lr=2.0633e-5,
        gamma=0.98,
        gae_lambda=0.92,
        clip_eps=0.1,
        ent_coef=0.000401762,
        vf_coef=0.58096,
        max_grad_norm=0.8,
        normalize_reward=True,
        num_epochs=20,
        num_minibatches=4,
    ),
    trainer=TrainerConfig(
        total_env_steps=1_000_000, num_steps=64, eval_every_iters=200, eval_episodes=10
    ),
)
# The same experiment on Gymnasium's HalfCheetah-v5 through the bridge (8 sync envs;
# `pip install -e ".[mujoco]"`).
PRESETS["gym_halfcheetah"] = dataclasses.replace(
    PRESETS["mujoco_halfcheetah"], env=EnvConfig("gymnasium:HalfCheetah-v5", num_envs=8)
)
# The builtin tasks at GPU scale (`rlcore.presets_cuda`: why they differ).
PRESETS.update(CUDA_PRESETS)

# GRPO: critic-free, groups of 4 envs sharing each start. Rollouts are as long as an episode
# can be (CartPole's 500-step limit is cut at 256: the same cut for every member keeps the
# group comparison fair), since without a critic nothing bootstraps past the rollout's end.
GRPO_PRESETS: dict[str, ExperimentConfig] = {
    "cartpole": ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=32),
        policy=PolicyConfig(hidden_sizes=(64, 64), activation="relu"),
        trainer=TrainerConfig(
            total_env_steps=400_000, num_steps=256, eval_every_iters=2, stop_at_eval_return=475
        ),
        algorithm="grpo",
        algo=GRPOConfig(group_size=4, lr=1e-3, num_epochs=5, num_minibatches=4),
    ),
    "push_cube": ExperimentConfig(
        env=EnvConfig("push_cube", num_envs=64),
        policy=PolicyConfig(activation="relu", normalize_obs=True, init_log_std=-0.5),
        trainer=TrainerConfig(
            total_env_steps=3_000_000,
            num_steps=100,
            eval_every_iters=3,
            eval_episodes=64,
            stop_at_eval_success=0.9,
        ),
        algorithm="grpo",
        algo=GRPOConfig(group_size=4, lr=1e-3, reward_scale=0.1, num_epochs=10, num_minibatches=8),
    ),
}


# SAC: off-policy, one gradient step per env step. Pendulum follows RL Zoo's settings (lr 1e-3,
# batch 256, gamma 0.99, tau 0.005, learned temperature) with 64x64 networks in place of 256x256
# (the same returns at a fraction of the update's cost on CPU) and 4 envs x 8 steps per
# iteration (32 gradient steps each).
SAC_PRESETS: dict[str, ExperimentConfig] = {
    "pendulum": ExperimentConfig(
        env=EnvConfig("pendulum", num_envs=4),
        policy=PolicyConfig(hidden_sizes=(64, 64), activation="relu"),
        trainer=TrainerConfig(
            total_env_steps=20_000, num_steps=8, eval_every_iters=25, eval_episodes=16,
            stop_at_eval_return=-200,
        ),
        algorithm="sac",
        algo=SACConfig(lr=1e-3),
        replay=ReplayConfig(capacity=100_000, batch_size=256, warmup_steps=1_000),
    ),
    # PushCube: the same recipe on 8 envs; success 0.9 is the target (episodes of 100 steps).
    "push_cube": ExperimentConfig(
        env=EnvConfig("push_cube", num_envs=8),
        policy=PolicyConfig(hidden_sizes=(128, 128), activation="relu", normalize_obs=True),
        trainer=TrainerConfig(
            total_env_steps=300_000, num_steps=8, eval_every_iters=50, eval_episodes=64,
            checkpoint_every_iters=1_000, stop_at_eval_success=0.9,
        ),
        algorithm="sac",
        algo=SACConfig(lr=1e-3),
        replay=ReplayConfig(capacity=300_000, batch_size=256, warmup_steps=5_000),
    ),
    # Native MuJoCo HalfCheetah: trial 37 of the platform's SAC study
    # (search/mujoco_halfcheetah-sac.yaml; its sampled lr and tau kept to the digit, so the
    # DVC experiment that confirmed them is this preset): 400x300 networks and a gradient
    # step every second env step, RL Zoo's batch 256, 10k random warm-up steps and gamma
    # otherwise. One env stepped once per iteration, as RL Zoo; bf16 matmuls where the
    # device has them natively (a shorter update: benchmarks/README.md, *sac_update*). At 1M
    # env steps it returns at least as much as RL Zoo's settings (this preset's before it)
    # for less CPU per env step; both ran as DVC experiments (figures and how to re-create
    # them: benchmarks/README.md, *sac_halfcheetah*).
    "mujoco_halfcheetah": ExperimentConfig(
        env=EnvConfig("mujoco:HalfCheetah", num_envs=1, options={"nthread": 1}),
        policy=PolicyConfig(hidden_sizes=(400, 300), activation="relu"),
        trainer=TrainerConfig(
            total_env_steps=1_000_000, num_steps=1, eval_every_iters=20_000, eval_episodes=8,
            checkpoint_every_iters=50_000,  # resumable progress (buffer included) every 50k steps
        ),
        algorithm="sac",
        algo=SACConfig(lr=7.448357644273519e-4, tau=3.225274559316043e-3, precision="auto"),
        replay=ReplayConfig(
            capacity=1_000_000, batch_size=256, warmup_steps=10_000, updates_per_step=0.5
        ),
    ),
}  # fmt: skip
# The same HalfCheetah experiment on Gymnasium's HalfCheetah-v5 through the bridge.
SAC_PRESETS["gym_halfcheetah"] = dataclasses.replace(
    SAC_PRESETS["mujoco_halfcheetah"], env=EnvConfig("gymnasium:HalfCheetah-v5", num_envs=1)
)
# The MuJoCo family's SAC defaults (what a Gymnasium or native MuJoCo env without a SAC preset
# of its own gets), here on Walker2d, which has none. Chosen by the platform's study across
# tasks at 100k env steps (search/mujoco_family-sac.yaml, trial 11): of its trials, the best
# mean normalised score on Walker2d, Hopper and HalfCheetah, and level with or above SB3's SAC
# defaults on the held-out InvertedPendulum, InvertedDoublePendulum, Reacher, Pusher and
# Swimmer (benchmarks/README.md, *suite*, "The SAC family study"). The study's base (the
# HalfCheetah preset above) with its schedule: 4 env steps then 4 gradient steps on batches
# of 128, 1k random warm-up steps, 256x256 networks, lr 4.4e-4, tau 0.0099 (the trial's
# values exactly as sampled). HalfCheetah keeps its own preset, tuned at 1M.
# In float32 on every machine, not the base's `precision: auto`: the study's CPU had
# AVX512-BF16, so its trials multiplied in bf16, and the two precisions learn differently
# (a seed's return up to 5x apart either way at 100k), so `auto` made the family's results
# depend on the user's CPU (benchmarks/README.md, *suite*, "SAC, 100k").
SAC_PRESETS["gym_locomotion"] = dataclasses.replace(
    SAC_PRESETS["gym_halfcheetah"],
    env=EnvConfig("gymnasium:Walker2d-v5", num_envs=1),
    policy=dataclasses.replace(SAC_PRESETS["gym_halfcheetah"].policy, hidden_sizes=(256, 256)),
    trainer=dataclasses.replace(  # an iteration is 4 env steps: the same 20k and 50k of them
        SAC_PRESETS["gym_halfcheetah"].trainer,
        num_steps=4, eval_every_iters=5_000, checkpoint_every_iters=12_500,
    ),
    algo=dataclasses.replace(
        SAC_PRESETS["gym_halfcheetah"].algo,
        lr=0.00044034879429383716, tau=0.009885464541753654, precision="float32",
    ),
    replay=dataclasses.replace(
        SAC_PRESETS["gym_halfcheetah"].replay,
        batch_size=128, warmup_steps=1_000, updates_per_step=1.0,
    ),
)  # fmt: skip
# SAC from the camera (push_cube_pixels), DrQ's recipe on PushCube's SAC settings: the critics
# read the image and the pusher's own state through one spatial-keypoint encoder that they
# train (the actor reads its features, detached); every sampled image shifted by up to 2
# pixels (DrQ's 4 at 84x84, scaled to 48x48). 100k transitions of 3x48x48 uint8 images,
# each stored once: ~0.7 GB. A starting point, not tuned: each env step's update passes 256
# images through the encoder, too slow on a CPU for runs of any length: they are for a GPU.
SAC_PRESETS["push_cube_pixels"] = dataclasses.replace(
    SAC_PRESETS["push_cube"],
    env=EnvConfig("push_cube_pixels", num_envs=8),
    policy=dataclasses.replace(
        SAC_PRESETS["push_cube"].policy,
        encoders={"image": "spatial"},
        image_features=32,
        critic_obs=("image", "proprio"),
    ),
    algo=dataclasses.replace(SAC_PRESETS["push_cube"].algo, random_shift=2),
    replay=dataclasses.replace(SAC_PRESETS["push_cube"].replay, capacity=100_000),
)


PRESETS_BY_ALGORITHM: dict[str, dict[str, ExperimentConfig]] = {
    "ppo": PRESETS,
    "grpo": GRPO_PRESETS,
    "sac": SAC_PRESETS,
}


def presets_source(algorithm: str) -> str | None:
    """The algorithm whose presets `algorithm` takes: a builtin its own; an algorithm of your
    own the one its `AlgorithmSpec.presets_from` names (None: it takes none)."""
    if algorithm in PRESETS_BY_ALGORITHM:
        return algorithm
    source = algorithm_spec(algorithm).presets_from
    if source is not None and source not in PRESETS_BY_ALGORITHM:
        raise ValueError(
            f"algorithm {algorithm}: presets_from must be one of {list(PRESETS_BY_ALGORITHM)}, "
            f"got {source!r}"
        )
    return source


def algorithm_settings(cfg: ExperimentConfig, algorithm: str) -> dict[str, Any]:
    """The settings preset `cfg`'s algorithm section gives `algorithm`: all of them to its own
    algorithm; to one that takes its presets (`presets_from`), those its config class has a
    field of the same name for (its own defaults fill the others)."""
    names = {field.name for field in dataclasses.fields(algorithm_spec(algorithm).config)}
    return {
        field.name: getattr(cfg.algo, field.name)
        for field in dataclasses.fields(cfg.algo)
        if field.name in names
    }


def preset(name: str, algorithm: str = "ppo") -> ExperimentConfig:
    """Return the tuned configuration of a builtin task for `algorithm` (ppo, grpo or sac)."""
    if algorithm not in PRESETS_BY_ALGORITHM:
        raise ValueError(
            f"algorithm must be one of {list(PRESETS_BY_ALGORITHM)}, got {algorithm!r}"
        )
    table = PRESETS_BY_ALGORITHM[algorithm]
    if name not in table:
        raise ValueError(f"{algorithm} preset must be one of {sorted(table)}, got {name!r}")
    return table[name]


# --- defaults by task family ------------------------------------------------------------
# What an experiment gets when it names no preset: the preset of its own env if there is one,
# else the settings of its family's preset (without that preset's env options and stop
# targets, which belong to its env), else the library's defaults. Families are told by name,
# without building the env: Gymnasium ids by their base name (`Hopper` of `Hopper-v5`).

DISCRETE_CLASSIC = "discrete classic control"
CONTINUOUS_CLASSIC = "continuous classic control"
MUJOCO_LOCOMOTION = "MuJoCo locomotion"
MANIPULATION = "manipulation"

# Gymnasium's MuJoCo suite; its two arms (Reacher, Pusher) take the same settings.
MUJOCO_SUITE = (
    "Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedPendulum",
    "InvertedDoublePendulum", "Swimmer", "Walker2d", "Reacher", "Pusher",
)  # fmt: skip
_GYMNASIUM_FAMILIES = {
    **dict.fromkeys(("CartPole", "Acrobot", "MountainCar"), DISCRETE_CLASSIC),
    **dict.fromkeys(("Pendulum", "MountainCarContinuous"), CONTINUOUS_CLASSIC),
    **dict.fromkeys(MUJOCO_SUITE, MUJOCO_LOCOMOTION),
}
_BUILTIN_FAMILIES = {
    "cartpole": DISCRETE_CLASSIC,
    "pendulum": CONTINUOUS_CLASSIC,
    "push_cube": MANIPULATION,
    "push_cube_pixels": MANIPULATION,
}
# Each family's defaults per algorithm: the preset they come from.
FAMILY_PRESETS: dict[str, dict[str, str]] = {
    DISCRETE_CLASSIC: {"ppo": "gym_acrobot", "grpo": "cartpole"},
    CONTINUOUS_CLASSIC: {"ppo": "pendulum", "sac": "pendulum"},
    MUJOCO_LOCOMOTION: {"ppo": "gym_locomotion", "sac": "gym_locomotion"},
    MANIPULATION: {"ppo": "push_cube", "grpo": "push_cube", "sac": "push_cube"},
}
AUTO, NONE = "auto", "none"  # the `preset` values that name no preset


def env_family(env_name: str) -> str | None:
    """The task family of an env name, or None for an env this table does not know."""
    if env_name.startswith(MUJOCO_PREFIX):
        return MUJOCO_LOCOMOTION
    if env_name.startswith(GYMNASIUM_PREFIX):
        env_id = env_name.removeprefix(GYMNASIUM_PREFIX).rsplit(":", 1)[-1].rsplit("/", 1)[-1]
        return _GYMNASIUM_FAMILIES.get(re.sub(r"-v\d+$", "", env_id))
    return _BUILTIN_FAMILIES.get(env_name)


@dataclasses.dataclass(frozen=True)
class PresetChoice:
    """Where an experiment's unset keys come from.

    `config` is None for the library's defaults. With `generic`, only its settings apply, not
    its env's name and options or its stop targets (they belong to another env).
    """

    description: str
    config: ExperimentConfig | None = None
    generic: bool = False


def _accelerated(cfg: ExperimentConfig) -> bool:
    """Whether a preset runs its env on an accelerator (a GPU preset)."""
    return not cfg.env.device.startswith("cpu")


def choose_preset(name: str, env_name: str, algorithm: str, device: str = "cpu") -> PresetChoice:
    """The defaults of an experiment: preset `name`, or for `auto` the env's own preset (its
    GPU preset where `device` is an accelerator and it has one), its family's, or the
    library's; `none`: the library's. An algorithm of your own takes the
    presets of the algorithm its spec names in `presets_from` (the choice's config is then
    that algorithm's: see `algorithm_settings`), or none. Raises ValueError for an unknown
    name, or a named preset for an algorithm that takes none."""
    if name == NONE:
        return PresetChoice("the library's defaults (preset: none)")
    source = presets_source(algorithm)
    table = PRESETS_BY_ALGORITHM.get(source or "", {})
    whose = algorithm if source == algorithm else f"{source}'s, for {algorithm}"
    if name != AUTO:
        if source is None:
            raise ValueError(
                f"{name!r}: algorithm {algorithm} takes no presets; declare whose it takes "
                f"where it registers, AlgorithmSpec(..., presets_from='ppo'), or write "
                f"preset: none"
            )
        if name not in table:
            known = ", ".join([AUTO, NONE, *sorted(table)])
            raise ValueError(f"unknown preset {name!r} for {whose}; one of: {known}")
        return PresetChoice(f"preset {name} ({whose})", table[name])
    own = [key for key, cfg in table.items() if cfg.env.name == env_name]
    accelerated = not device.startswith("cpu")
    on_device = [key for key in own if _accelerated(table[key]) == accelerated]
    own = on_device or [key for key in own if not _accelerated(table[key])]
    if own:
        where = f" on {device}" if on_device and accelerated else ""
        return PresetChoice(f"preset {own[0]} ({whose}), the env's own{where}", table[own[0]])
    family = env_family(env_name)
    preset_name = FAMILY_PRESETS.get(family or "", {}).get(source or "")
    if source is None or family is None or preset_name is None:
        if source is None:
            why = f"{algorithm} takes no presets"
        else:
            why = "no known task family" if family is None else f"no {source} defaults for it"
        return PresetChoice(f"the library's defaults ({env_name}: {why})")
    cfg, why = table[preset_name], ""
    if family == MUJOCO_LOCOMOTION and source == "ppo":  # split by the env's traits
        cfg, why = split_by_traits(cfg, env_name)
    return PresetChoice(
        f"{family} defaults (preset {preset_name}'s settings, {whose}{why})", cfg, True
    )


def experiment_for(
    env_name: str, algorithm: str = "ppo", preset: str = AUTO, seed: int = 0
) -> ExperimentConfig:
    """The experiment params.yaml's `preset` gives an env and algorithm and nothing else set:
    for `auto`, the env's own preset, else its family's settings (without that preset's env
    options and stop targets, which belong to its env), else the library's defaults; or the
    preset `preset` names (`none`: the library's defaults). Training seed `seed`.

    `Trainer(experiment_for("gymnasium:Hopper-v5", algorithm="sac"))` trains what
    `python -m pipelines train` trains for that file; an algorithm of your own gets the
    presets its spec names in `presets_from` (`algorithm_settings`). Raises ValueError for an
    unknown preset name.
    """
    choice = choose_preset(preset, env_name, algorithm)
    cfg = choice.config
    if cfg is None:
        cfg = ExperimentConfig(env=EnvConfig(env_name), algorithm=algorithm)
    elif cfg.env.name != env_name:  # a family's settings, or a named preset of another env
        env = dataclasses.replace(cfg.env, name=env_name, options={})
        cfg = dataclasses.replace(cfg, env=env)
        if choice.generic:
            trainer = dataclasses.replace(
                cfg.trainer, stop_at_eval_return=None, stop_at_eval_success=None
            )
            cfg = dataclasses.replace(cfg, trainer=trainer)
    algo = cfg.algo
    if cfg.algorithm != algorithm:  # another algorithm's preset: the settings it shares
        algo = algorithm_spec(algorithm).config(**algorithm_settings(cfg, algorithm))
    trainer = dataclasses.replace(cfg.trainer, seed=seed)
    return dataclasses.replace(cfg, algorithm=algorithm, algo=algo, trainer=trainer)
