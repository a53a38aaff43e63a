"""PPO's configuration, apart from the algorithm so that reading it needs no tensordict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LR_SCHEDULES = ("constant", "linear", "kl_adaptive")
# "auto" micro-batches never go below this many samples: smaller chunks of a 64x64 MLP
# cost more in per-chunk overhead than in compute on CPU (1024: +20-30% update time).
MIN_AUTO_MICROBATCH = 2048


@dataclass(frozen=True)
class PPOConfig:
    gamma: float = 0.99
    gae_lambda: float = 0.95
    reward_scale: float = 1.0
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

    def __post_init__(self) -> None:
        def check(ok: bool, field: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"ppo.{field} must be {allowed}, got {getattr(self, field)!r}")

        check(0.0 < self.gamma <= 1.0, "gamma", "in (0, 1]")
        check(0.0 <= self.gae_lambda <= 1.0, "gae_lambda", "in [0, 1]")
        check(self.reward_scale > 0, "reward_scale", "> 0")
        check(self.clip_eps > 0, "clip_eps", "> 0")
        check(
            self.clip_value_eps is None or self.clip_value_eps > 0, "clip_value_eps", "> 0 or null"
        )
        check(self.ent_coef >= 0, "ent_coef", ">= 0")
        check(self.vf_coef >= 0, "vf_coef", ">= 0")
        check(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", "> 0 or null")
        check(self.lr > 0, "lr", "> 0")
        check(self.lr_schedule in LR_SCHEDULES, "lr_schedule", f"one of {LR_SCHEDULES}")
        check(self.desired_kl > 0, "desired_kl", "> 0")
        check(self.target_kl is None or self.target_kl > 0, "target_kl", "> 0 or null")
        check(self.num_epochs >= 1, "num_epochs", ">= 1")
        check(self.num_minibatches >= 1, "num_minibatches", ">= 1")
        mb = self.microbatch_size
        check(
            mb is None or mb == "auto" or (type(mb) is int and mb >= 1),
            "microbatch_size",
            "an int >= 1, 'auto' or null (null: the whole minibatch at once)",
        )
