"""The algorithms' configurations, apart from them so that reading one needs no tensordict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlcore.algos.registry import AlgorithmSpec, ReportedSettings, register_algorithm

LR_SCHEDULES = ("constant", "linear", "kl_adaptive")
# The update's matrix products: "bfloat16" under autocast, "auto" bf16 where the device
# multiplies it natively (`rlcore.precision.trains_bf16`).
PRECISIONS = ("float32", "bfloat16", "auto")
# "auto" micro-batches never go below this many samples: smaller chunks of a 64x64 MLP
# cost more in per-chunk overhead than in compute on CPU (`benchmarks.update_memory`).
MIN_AUTO_MICROBATCH = 2048
# Fewest planned minibatch steps for which `runtime.compile: auto` compiles PPO's step
# (`rlcore.algos.compile.compile_pays`): a cold compile costs about ten seconds of CPU and
# the whole step saves about 0.7 ms a step at the MuJoCo family's sizes
# (benchmarks/README.md, *fast_path*), so a run breaks even near 15,000.
AUTO_COMPILE_MIN_STEPS = 20_000

Check = Callable[[bool, str, str], None]


def _checker(section: str, config: Any) -> Check:
    """`check(ok, field, allowed)` raising "section.field must be allowed, got value"."""

    def check(ok: bool, field: str, allowed: str) -> None:
        if not ok:
            raise ValueError(f"{section}.{field} must be {allowed}, got {getattr(config, field)!r}")

    return check


def optimizer_parts(cfg: Any, *more: str) -> tuple[str, ...]:
    """The report's optimizer line of PPO-style settings: rate (schedule), epochs x
    minibatches, then `more`, and bf16 matrix products where set."""
    mixed = {"bfloat16": ("bf16 matmuls",), "auto": ("bf16 matmuls where native",)}
    return (
        f"lr {cfg.lr:g} ({cfg.lr_schedule})",
        f"{cfg.num_epochs} epochs x {cfg.num_minibatches} minibatches",
        *more,
        *mixed.get(cfg.precision, ()),
    )


def _check_optimization(check: Check, cfg: Any) -> None:
    """The rules PPO and GRPO share: step sizes, epochs, minibatches, micro-batches."""
    check(cfg.max_grad_norm is None or cfg.max_grad_norm > 0, "max_grad_norm", "> 0 or null")
    check(cfg.lr > 0, "lr", "> 0")
    check(cfg.num_epochs >= 1, "num_epochs", ">= 1")
    check(cfg.num_minibatches >= 1, "num_minibatches", ">= 1")
    check(cfg.precision in PRECISIONS, "precision", f"one of {list(PRECISIONS)}")
    mb = cfg.microbatch_size
    check(
        mb is None or mb == "auto" or (type(mb) is int and mb >= 1),
        "microbatch_size",
        "an int >= 1, 'auto' or null (null: the whole minibatch at once)",
    )


class WholeStepRule:
    """When a compiled on-policy update (PPO's, GRPO's) runs as whole compiled steps."""

    microbatch_size: int | Literal["auto"] | None

    def takes_whole_steps(self, world_size: int) -> bool:
        """Whether a compiled update runs as whole compiled steps (`rlcore.algos.whole_step`):
        one process, whole minibatches (no explicit micro-batches); else only the loss
        compiles."""
        return world_size == 1 and self.microbatch_size in (None, "auto")


@dataclass(frozen=True)
class PPOConfig(WholeStepRule):
    """PPO's hyperparameters, checked once here so that `PPO` can trust them.

    `lr_schedule`: "constant", "linear" (to 0 over the run) or "kl_adaptive" (rsl_rl's rule,
    steering the rate toward `desired_kl`); `target_kl` ends an update's epochs early once
    the approximate KL passes 1.5 x it.
    `precision: bfloat16` runs the hidden layers' matrix products of the update in bfloat16
    (autocast); the output layers, log-probabilities, values and losses, the weights and
    Adam's state stay float32, and collection acts in float32. `auto`: bfloat16 where the
    device multiplies it natively (AVX512-BF16 or AMX CPUs, Ampere and later GPUs).
    """

    gamma: float = 0.99
    gae_lambda: float = 0.95
    reward_scale: float = 1.0
    normalize_reward: bool = False  # divide by the running std of the discounted return
    clip_eps: float = 0.2
    clip_value_eps: float | None = None
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float | None = 0.5
    lr: float = 3e-4
    lr_schedule: str = "constant"
    desired_kl: float = 0.01
    target_kl: float | None = None
    num_epochs: int = 10
    num_minibatches: int = 4
    microbatch_size: int | Literal["auto"] | None = "auto"
    normalize_advantage: bool = True
    adam_eps: float = 1e-5
    precision: str = "float32"

    def __post_init__(self) -> None:
        check = _checker("ppo", self)
        _check_optimization(check, self)
        check(0.0 < self.gamma <= 1.0, "gamma", "in (0, 1]")
        check(0.0 <= self.gae_lambda <= 1.0, "gae_lambda", "in [0, 1]")
        check(self.reward_scale > 0, "reward_scale", "> 0")
        check(self.clip_eps > 0, "clip_eps", "> 0")
        check(
            self.clip_value_eps is None or self.clip_value_eps > 0, "clip_value_eps", "> 0 or null"
        )
        check(self.ent_coef >= 0, "ent_coef", ">= 0")
        check(self.vf_coef >= 0, "vf_coef", ">= 0")
        check(self.lr_schedule in LR_SCHEDULES, "lr_schedule", f"one of {LR_SCHEDULES}")
        check(self.desired_kl > 0, "desired_kl", "> 0")
        check(self.target_kl is None or self.target_kl > 0, "target_kl", "> 0 or null")

    def check_experiment(self, experiment: Any) -> None:
        """Each process splits its `env.num_envs x trainer.num_steps` rollout into minibatches."""
        rollout = experiment.env.num_envs * experiment.trainer.num_steps
        if self.num_minibatches > rollout:
            raise ValueError(
                f"ppo.num_minibatches must be at most the rollout's env.num_envs x "
                f"trainer.num_steps = {rollout} transitions, got {self.num_minibatches}"
            )

    def report(self) -> ReportedSettings:
        """What the run report shows of these settings."""
        extra = (
            f"gamma {self.gamma:g}",
            f"GAE lambda {self.gae_lambda:g}",
            f"clip {self.clip_eps:g}",
        )
        return ReportedSettings(optimizer=optimizer_parts(self, *extra))


register_algorithm(
    AlgorithmSpec("ppo", PPOConfig, "rlcore.algos.ppo:PPO", "rlcore.policies:actor_critic_policy")
)


EPISODE_MODES = ("restart_groups", "first_done")


@dataclass(frozen=True)
class GRPOConfig(WholeStepRule):
    """Critic-free GRPO: step-wise returns normalised within groups of envs sharing a start.

    `episode_mode`:
      - "restart_groups": a group is reset together, from one new shared state, as soon as
        all its members are done; a member that finished early is masked out of the loss
        until then, so every episode that reaches the loss is a complete group sample
        (or, for the last one, cut by the rollout's end at the same step for every member).
      - "first_done": the seed's `truncate_at_first_done`: only each env's first episode of
        the rollout counts; everything after it is masked (needs `reset_every_rollout`).
    """

    group_size: int = 4
    gamma: float = 0.99
    reward_scale: float = 1.0
    eps: float = 1e-8
    clip_eps: float = 0.2
    ent_coef: float = 0.0
    kl_coef: float = 0.0
    max_grad_norm: float | None = 0.5
    lr: float = 3e-4
    lr_schedule: str = "constant"
    num_epochs: int = 10
    num_minibatches: int = 4
    microbatch_size: int | Literal["auto"] | None = "auto"
    adam_eps: float = 1e-5
    precision: str = "float32"
    reset_every_rollout: bool = True
    episode_mode: str = "restart_groups"

    def __post_init__(self) -> None:
        check = _checker("grpo", self)
        _check_optimization(check, self)
        check(type(self.group_size) is int and self.group_size >= 2, "group_size", "an int >= 2")
        check(0.0 < self.gamma <= 1.0, "gamma", "in (0, 1]")
        check(self.reward_scale > 0, "reward_scale", "> 0")
        check(self.eps > 0, "eps", "> 0")
        check(self.clip_eps > 0, "clip_eps", "> 0")
        check(self.ent_coef >= 0, "ent_coef", ">= 0")
        check(self.kl_coef >= 0, "kl_coef", ">= 0")
        check(self.lr_schedule in ("constant", "linear"), "lr_schedule", "constant or linear")
        check(self.episode_mode in EPISODE_MODES, "episode_mode", f"one of {EPISODE_MODES}")
        check(
            self.reset_every_rollout or self.episode_mode != "first_done",
            "reset_every_rollout",
            "true when episode_mode is 'first_done' (otherwise the members of a group would "
            "start a rollout from different states)",
        )

    def report(self) -> ReportedSettings:
        """What the run report shows of these settings."""
        return ReportedSettings(
            optimizer=optimizer_parts(self, f"gamma {self.gamma:g}", f"clip {self.clip_eps:g}"),
            summary=f"groups of {self.group_size}, {self.episode_mode}, "
            f"KL coefficient {self.kl_coef:g}",
        )

    def check_experiment(self, experiment: Any) -> None:
        """Every group is a block of envs: `group_size` must divide `env.num_envs`."""
        if experiment.env.num_envs % self.group_size != 0:
            raise ValueError(
                f"grpo.group_size must divide env.num_envs ({experiment.env.num_envs}), "
                f"got {self.group_size}"
            )


register_algorithm(
    AlgorithmSpec("grpo", GRPOConfig, "rlcore.algos.grpo:GRPO", "rlcore.policies:actor_policy")
)
