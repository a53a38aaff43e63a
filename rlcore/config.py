"""The typed configuration of one experiment; importing it pulls in neither torch nor tensordict.

Validation happens here, once, in `__post_init__`, so tools that only read or check a
configuration (the pipeline's params, reports, flows) start in milliseconds, and stages that
only act with a trained policy do not pay for the rollout machinery's imports.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

from rlcore.algos.registry import algorithm_spec

ENV_NAMES = (
    "cartpole",
    "pendulum",
    "push_cube",
    "push_cube_pixels",
)  # rlcore.envs.ENVS builds them
GYMNASIUM_PREFIX = "gymnasium:"  # "gymnasium:<env id>": any Gymnasium env, through the bridge
MUJOCO_PREFIX = "mujoco:"  # "mujoco:<task>": native batched MuJoCo (rlcore.envs.mujoco_batch)
MUJOCO_TASKS = ("HalfCheetah", "Hopper", "Ant")  # rlcore.envs.mujoco_batch.TASKS builds them
ACTIVATION_NAMES = ("tanh", "relu", "elu")  # rlcore.policies.ACTIVATIONS builds them
# Per observation entry: a float vector read by the MLP, or an image encoder (rlcore.encoders).
ENCODER_NAMES = ("mlp", "nature", "drq", "spatial")
MAX_FRAME_STACK = 16  # env.frame_stack at most (DQN stacks 4): a larger one is a typo
_DEVICE = re.compile(r"^(cpu|cuda|mps|xpu|meta)(:\d+)?$")


def _check_gymnasium_id(name: str) -> None:
    """The id must be registered; Gymnasium's `module:EnvId` form imports `module` first
    (which registers the user's env), as `gymnasium.make` does."""
    env_id = name.removeprefix(GYMNASIUM_PREFIX)
    import gymnasium  # only for bridged envs: the registry knows every id (no torch import)

    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(
                f"env.name {name!r}: cannot import module {module!r} ({exc}); it must be "
                f"importable from the project's directory or installed"
            ) from None
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as exc:
        raise ValueError(f"env.name {name!r}: unknown Gymnasium env id ({exc})") from None


@dataclass(frozen=True)
class EnvConfig:
    """Which env, how many instances, where; `options` go to the env's constructor.

    `name` is a builtin env, `gymnasium:<id>` (e.g. `gymnasium:CartPole-v1`) or
    `mujoco:<task>` (e.g. `mujoco:HalfCheetah`). For `gymnasium:`, `options` are the bridge's
    (`rlcore.envs.gym_bridge.GymnasiumEnv`): vectorization, env_kwargs, max_episode_steps,
    actions, autoreset; for `mujoco:`, `rlcore.envs.mujoco_batch.MujocoEnv`'s: nthread, xml_file,
    engine.

    `frame_stack` (k > 1): the policy sees each camera image entry with its k - 1
    predecessors stacked on the channels (`rlcore.envs.frame_stack.FrameStack`), so one
    observation shows motion; replay buffers still store each frame once. An env without
    camera images is refused.
    """

    name: str = "cartpole"
    num_envs: int = 64
    device: str = "cpu"
    options: dict[str, Any] = field(default_factory=dict)
    frame_stack: int = 1

    def __post_init__(self) -> None:
        if self.name.startswith(GYMNASIUM_PREFIX):
            _check_gymnasium_id(self.name)
        elif self.name.startswith(MUJOCO_PREFIX):
            task = self.name.removeprefix(MUJOCO_PREFIX)
            if task not in MUJOCO_TASKS:
                raise ValueError(
                    f"env.name: unknown MuJoCo task {task!r}; choose one of "
                    f"{[MUJOCO_PREFIX + t for t in MUJOCO_TASKS]}"
                )
        elif self.name not in ENV_NAMES:
            raise ValueError(
                f"env.name must be one of {sorted(ENV_NAMES)}, '{GYMNASIUM_PREFIX}<env id>' or "
                f"'{MUJOCO_PREFIX}<task>' ({', '.join(MUJOCO_TASKS)}), got {self.name!r}"
            )
        if self.num_envs <= 0:
            raise ValueError(f"env.num_envs must be a positive integer, got {self.num_envs}")
        if not _DEVICE.match(self.device):
            raise ValueError(
                f"env.device must be a torch device such as 'cpu', 'cuda' or 'cuda:1', "
                f"got {self.device!r}"
            )
        if not 1 <= self.frame_stack <= MAX_FRAME_STACK:
            raise ValueError(
                f"env.frame_stack must be an integer in [1, {MAX_FRAME_STACK}] (frames per "
                f"camera image; 1: no stacking), got {self.frame_stack}"
            )


@dataclass(frozen=True)
class PolicyConfig:
    """MLP sizes and options shared by actor and critic, and what each reads of the env's
    named observation entries (`rlcore.observations`).

    `actor_obs` / `critic_obs`: the entries each network reads (None: the actor every entry
    but the env's privileged ones, the critic every entry), so an asymmetric critic is one
    line. `encoders`: per entry, `mlp` (a float vector, read by the network's MLP) or an
    image encoder (`nature`, `drq`, `spatial`; `rlcore.encoders`); an entry not named gets
    `mlp` if it is a vector, else `nature` for images of at least 36x36 pixels and `drq`
    below.

    `aux_obs`: vector entries (typically the privileged state) that the actor's image
    features learn to predict, by a regression loss weighted `aux_coef` added to PPO's or
    GRPO's: a policy gradient alone trains a camera encoder slowly, while where the cube
    and the goal are is dense supervision the simulator gives for free. Training only; the
    actor still reads only its own entries.
    """

    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    init_log_std: float = 0.0
    normalize_obs: bool = False
    actor_obs: tuple[str, ...] | None = None
    critic_obs: tuple[str, ...] | None = None
    encoders: dict[str, str] = field(default_factory=dict)
    image_features: int = 256  # width of each image encoder's output
    share_image_encoder: bool = False  # actor and critic train one encoder per image entry
    aux_obs: tuple[str, ...] = ()
    aux_coef: float = 1.0

    def __post_init__(self) -> None:
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"policy.hidden_sizes must be positive ints, got {self.hidden_sizes}")
        if self.activation not in ACTIVATION_NAMES:
            allowed = sorted(ACTIVATION_NAMES)
            raise ValueError(f"policy.activation must be one of {allowed}, got {self.activation!r}")
        for name in ("actor_obs", "critic_obs"):
            keys = getattr(self, name)
            if keys is not None and (not keys or len(set(keys)) != len(keys)):
                raise ValueError(
                    f"policy.{name} must name observation entries, each once (or be null for "
                    f"the default), got {list(keys)}"
                )
        for key, kind in self.encoders.items():
            if kind not in ENCODER_NAMES:
                raise ValueError(
                    f"policy.encoders.{key}: {kind!r} is no encoder; one of {list(ENCODER_NAMES)}"
                )
        if self.image_features <= 0:
            raise ValueError(f"policy.image_features must be positive, got {self.image_features}")
        if len(set(self.aux_obs)) != len(self.aux_obs):
            raise ValueError(f"policy.aux_obs must name each entry once, got {list(self.aux_obs)}")
        if not (self.aux_coef >= 0 and math.isfinite(self.aux_coef)):
            raise ValueError(f"policy.aux_coef must be a finite number >= 0, got {self.aux_coef}")


@dataclass(frozen=True)
class TrainerConfig:
    """The run's budget, seed, evaluation and checkpoint cadence, and early-stop targets.

    `eval_every_iters` and `checkpoint_every_iters` count training iterations (0 disables);
    a stop target ends the run at the first evaluation that meets it.
    """

    total_env_steps: int = 100_000
    num_steps: int = 32
    seed: int = 0
    eval_every_iters: int = 10
    eval_episodes: int = 16
    checkpoint_every_iters: int = 0
    stop_at_eval_return: float | None = None
    stop_at_eval_success: float | None = None

    def __post_init__(self) -> None:
        for name in ("total_env_steps", "num_steps", "eval_episodes"):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"trainer.{name} must be a positive integer, got {getattr(self, name)}"
                )
        for name in ("eval_every_iters", "checkpoint_every_iters"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"trainer.{name} must be >= 0 (0 disables), got {getattr(self, name)}"
                )

    def stop_at(self) -> dict[str, float]:
        """The early-stop targets that are set, by what they are met on: `{"success": 0.9}`
        stops the first evaluation whose success rate is >= 0.9 (`return`: its mean
        episode return)."""
        targets = {"return": self.stop_at_eval_return, "success": self.stop_at_eval_success}
        return {name: value for name, value in targets.items() if value is not None}

    def stop_targets(self) -> str:
        """The early-stop targets in words ("evaluation success >= 0.9"), or ""."""
        return " or ".join(
            f"evaluation {name} >= {value:g}" for name, value in self.stop_at().items()
        )


@dataclass(frozen=True)
class OfflineConfig:
    """An offline dataset (written by `python -m pipelines collect`) mixed into every batch.

    `fraction` of each replay batch comes from the dataset, the rest from online experience;
    1.0 with `trainer.total_env_steps` of 0 trains offline only.
    """

    path: str
    fraction: float = 0.5

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("offline.path must name a dataset directory")
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"offline.fraction must be in [0, 1], got {self.fraction}")


@dataclass(frozen=True)
class ReplayConfig:
    """The off-policy loop's replay buffer and update schedule (unused on-policy).

    Each iteration collects `env.num_envs x trainer.num_steps` env steps into the buffer,
    then takes `updates_per_step` gradient steps per env step collected (the update-to-data
    ratio), each on a uniform batch of `batch_size`. The first `warmup_steps` env steps act
    uniformly at random and take no gradient step. `save_in_checkpoint` (null: when the
    buffer's nominal size is under 1 GB) keeps resume exact; without it a resumed run
    starts from an empty buffer. The buffer stores each observation once
    (`rlcore.stream_replay`), `capacity` rounded up to whole rows of `env.num_envs`.
    """

    capacity: int = 1_000_000
    batch_size: int = 256
    warmup_steps: int = 10_000
    updates_per_step: float = 1.0
    save_in_checkpoint: bool | None = None
    offline: OfflineConfig | None = None

    def __post_init__(self) -> None:
        for name in ("capacity", "batch_size"):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"replay.{name} must be a positive integer, got {value}")
        if self.warmup_steps < 0:
            raise ValueError(f"replay.warmup_steps must be >= 0, got {self.warmup_steps}")
        if not self.updates_per_step > 0:
            raise ValueError(f"replay.updates_per_step must be > 0, got {self.updates_per_step}")


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything one training run needs; its hash guards resumption.

    `algorithm` names a registered algorithm (`rlcore.algos.registry`) and `algo` is its
    config (its defaults when omitted); `replay` configures the off-policy loop.
    """

    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    algorithm: str = "ppo"
    algo: Any = None
    replay: ReplayConfig = field(default_factory=ReplayConfig)

    def __post_init__(self) -> None:
        spec = algorithm_spec(self.algorithm)
        if self.algo is None:
            object.__setattr__(self, "algo", spec.config())
        elif not isinstance(self.algo, spec.config):
            raise ValueError(
                f"algorithm {self.algorithm!r} takes a {spec.config.__name__}, "
                f"got a {type(self.algo).__name__}"
            )
        check = getattr(self.algo, "check_experiment", None)
        if check is not None:
            check(self)

    @property
    def steps_per_iter(self) -> int:
        """Env steps one process collects per iteration: `num_envs x num_steps`."""
        return self.env.num_envs * self.trainer.num_steps

    @property
    def total_iters(self) -> int:
        """Iterations the env-step budget buys one process (at least one)."""
        return max(self.trainer.total_env_steps // self.steps_per_iter, 1)
