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


def make_env(cfg: EnvConfig, num_envs: int | None = None, *, grouped: bool = False) -> BatchedEnv:
    """Build the configured env (optionally with another instance count, e.g. for eval).

    `grouped`: the env will run grouped episodes (GRPO), which need every step to be a
    transition, so a Gymnasium env built with `sync`/`async` resets within the step unless
    its `autoreset` option says otherwise.
    """
    count = num_envs or cfg.num_envs
    if cfg.name.startswith(GYMNASIUM_PREFIX):
        from rlcore.envs.gym_bridge import GymnasiumEnv

        env_id = cfg.name.removeprefix(GYMNASIUM_PREFIX)
        options = dict(cfg.options)
        if grouped and options.get("vectorization", "sync") in ("sync", "async"):
            options.setdefault("autoreset", "same-step")
        return GymnasiumEnv(env_id, count, device=cfg.device, **options)
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
