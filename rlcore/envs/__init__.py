"""Builtin batched torch environments and the registry that builds them from config."""

from __future__ import annotations

from collections.abc import Callable

from rlcore.config import GYMNASIUM_PREFIX, MUJOCO_PREFIX, EnvConfig
from rlcore.envs.base import BatchedEnv, StepSlot, TorchEnv
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
    count = num_envs or cfg.num_envs
    if cfg.name.startswith(GYMNASIUM_PREFIX):
        from rlcore.envs.gym_bridge import GymnasiumEnv

        env_id = cfg.name.removeprefix(GYMNASIUM_PREFIX)
        return GymnasiumEnv(env_id, count, device=cfg.device, **cfg.options)
    if cfg.name.startswith(MUJOCO_PREFIX):
        from rlcore.envs.mujoco_batch import MujocoEnv

        task = cfg.name.removeprefix(MUJOCO_PREFIX)
        return MujocoEnv(task, count, device=cfg.device, **cfg.options)
    return ENVS[cfg.name](count, device=cfg.device, **cfg.options)


__all__ = [
    "ENVS",
    "BatchedEnv",
    "CartPole",
    "EnvConfig",
    "Pendulum",
    "PushCube",
    "StepSlot",
    "TorchEnv",
    "make_env",
]
