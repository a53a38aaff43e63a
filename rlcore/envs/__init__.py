"""Builtin batched torch environments and the registry that builds them from config."""

from __future__ import annotations

from collections.abc import Callable

from rlcore.config import EnvConfig
from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.envs.cartpole import CartPole
from rlcore.envs.pendulum import Pendulum
from rlcore.envs.push_cube import PushCube

ENVS: dict[str, Callable[..., BatchedEnv]] = {
    "cartpole": CartPole,
    "pendulum": Pendulum,
    "push_cube": PushCube,
}


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
