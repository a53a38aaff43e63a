"""Builtin batched torch environments and the registry that builds them from config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.envs.cartpole import CartPole
from rlcore.envs.pendulum import Pendulum
from rlcore.envs.push_cube import PushCube

ENVS: dict[str, Callable[..., BatchedEnv]] = {
    "cartpole": CartPole,
    "pendulum": Pendulum,
    "push_cube": PushCube,
}


@dataclass(frozen=True)
class EnvConfig:
    """Which env, how many instances, where; `options` go to the env's constructor."""

    name: str = "cartpole"
    num_envs: int = 64
    device: str = "cpu"
    group_size: int = 1
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in ENVS:
            raise ValueError(f"env.name must be one of {sorted(ENVS)}, got {self.name!r}")
        if self.num_envs <= 0:
            raise ValueError(f"env.num_envs must be a positive integer, got {self.num_envs}")
        if self.group_size <= 0 or self.num_envs % self.group_size != 0:
            raise ValueError(
                f"env.group_size must be a positive divisor of env.num_envs ({self.num_envs}), "
                f"got {self.group_size}"
            )
        try:
            torch.device(self.device)
        except RuntimeError as exc:
            raise ValueError(
                f"env.device must be a torch device string, got {self.device!r}"
            ) from exc


def make_env(cfg: EnvConfig, num_envs: int | None = None) -> BatchedEnv:
    """Build the configured env (optionally with another instance count, e.g. for eval)."""
    return ENVS[cfg.name](num_envs or cfg.num_envs, device=cfg.device, **cfg.options)


__all__ = [
    "ENVS",
    "BatchedEnv",
    "CartPole",
    "EnvConfig",
    "Pendulum",
    "PushCube",
    "StepSlot",
    "make_env",
]
