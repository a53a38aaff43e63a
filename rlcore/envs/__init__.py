"""Builtin batched torch environments and the registry that builds them from config."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from rlcore.config import GYMNASIUM_PREFIX, MUJOCO_PREFIX, EnvConfig
from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.envs.cartpole import CartPole
from rlcore.envs.frame_stack import FrameStack
from rlcore.envs.pendulum import Pendulum
from rlcore.envs.push_cube import PushCube
from rlcore.envs.push_cube_pixels import PushCubePixels
from rlcore.envs.torch_env import TorchEnv
from rlcore.errors import ConfigError

ENVS: dict[str, Callable[..., BatchedEnv]] = {
    "cartpole": CartPole,
    "pendulum": Pendulum,
    "push_cube": PushCube,
    "push_cube_pixels": PushCubePixels,
}


def make_env(
    cfg: EnvConfig,
    num_envs: int | None = None,
    *,
    every_step_a_transition: bool = False,
    render_size: int | None = None,
) -> BatchedEnv:
    """Build the configured env (optionally with another instance count, e.g. for eval).

    `every_step_a_transition`: the run needs every env step to be a transition (GRPO's
    grouped episodes; the offline dataset collector), so a
    Gymnasium env built with `sync`/`async` resets within the step unless its `autoreset`
    option says otherwise. `render_size`: frames will be asked for at this
    size (the video stage), so a Gymnasium env that renders offscreen at a fixed size is
    built at it rather than rendering large and shrinking every frame.

    With `env.frame_stack` above 1 the env's camera images are stacked (`FrameStack`).

    Raises `ConfigError` naming the key for an unusable `env.device` or an option the env
    does not take, before anything is built, and for frame stacking on an env without
    camera images, once it is built (and closed again).
    """
    count = num_envs or cfg.num_envs
    check_device(cfg.device)
    if cfg.name.startswith(GYMNASIUM_PREFIX):
        from rlcore.envs.gym_bridge import GymnasiumEnv

        env_id = cfg.name.removeprefix(GYMNASIUM_PREFIX)
        options = dict(cfg.options)
        _check_options(cfg.name, GymnasiumEnv, options)
        if every_step_a_transition and options.get("vectorization", "sync") in ("sync", "async"):
            options.setdefault("autoreset", "same-step")
        return _built(
            cfg,
            lambda: GymnasiumEnv(
                env_id, count, device=cfg.device, render_size=render_size, **options
            ),
        )
    if cfg.name.startswith(MUJOCO_PREFIX):
        from rlcore.envs.mujoco_batch import MujocoEnv

        task = cfg.name.removeprefix(MUJOCO_PREFIX)
        _check_options(cfg.name, MujocoEnv, cfg.options)
        return _built(cfg, lambda: MujocoEnv(task, count, device=cfg.device, **cfg.options))
    _check_options(cfg.name, ENVS[cfg.name], cfg.options)
    return _built(cfg, lambda: ENVS[cfg.name](count, device=cfg.device, **cfg.options))


# Constructor parameters that are not options: make_env passes them itself.
_NOT_OPTIONS = {"self", "num_envs", "device", "env_id", "task", "vector_env", "render_size"}


def _check_options(name: str, factory: Callable[..., BatchedEnv], options: dict) -> None:
    """Every `env.options` key must be a keyword the env's constructor takes."""
    accepted = [
        p.name
        for p in inspect.signature(factory).parameters.values()
        if p.name not in _NOT_OPTIONS and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    for key in options:
        if key not in accepted:
            takes = f"it takes {accepted}" if accepted else "it takes none"
            raise ConfigError(f"env.options.{key}: not an option of {name} ({takes})")


def _built(cfg: EnvConfig, build: Callable[[], BatchedEnv]) -> BatchedEnv:
    """Run the env's constructor (its complaints about an option's value name `env.options`)
    and stack its frames if `env.frame_stack` says so."""
    try:
        env = build()
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"env.options of {cfg.name} ({cfg.options}): {exc}") from exc
    if cfg.frame_stack == 1:
        return env
    try:
        return FrameStack(env, cfg.frame_stack, name=cfg.name)
    except ConfigError:
        env.close()
        raise


def check_device(device: str) -> None:
    """Fail with one line when `env.device` names an accelerator torch cannot use here."""
    kind, _, index = device.partition(":")
    if kind == "cpu" or kind == "meta":
        return
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = (
                f"this torch ({torch.__version__}) is built without CUDA"
                if torch.version.cuda is None
                else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
            )
            raise ConfigError(f"env.device {device!r}: CUDA is not available ({why}); use 'cpu'")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise ConfigError(
                f"env.device {device!r}: torch sees {count} CUDA device(s) (cuda:0..{count - 1})"
            )
        return
    backend = getattr(torch, kind, None)
    if backend is None or not backend.is_available():
        raise ConfigError(f"env.device {device!r}: torch has no usable {kind} device here")


__all__ = [
    "ENVS",
    "BatchedEnv",
    "CartPole",
    "EnvConfig",
    "FrameStack",
    "Pendulum",
    "PushCube",
    "PushCubePixels",
    "StepSlot",
    "TorchEnv",
    "check_device",
    "make_env",
]
