"""Building the Gymnasium vector env that the bridge (`rlcore.envs.gym_bridge`) wraps, from an
env id: `gymnasium.make_vec` with the bridge's options, built to render frames for videos
where the env can, with MuJoCo's warnings reported as Python warnings."""

from __future__ import annotations

import collections
import contextlib
import re
import sys
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.wrappers import FlattenObservation

from rlcore.envs.gym_spaces import GymnasiumBridgeError, needs_flattening

VECTORIZATIONS = ("sync", "async", "vector_entry_point")
AUTORESET_MODES = {"next-step": AutoresetMode.NEXT_STEP, "same-step": AutoresetMode.SAME_STEP}
# Python's words for keywords a function does not take: one it names, or all where it takes
# none (Gymnasium keeps them in its message).
_REFUSED = re.compile(r"unexpected keyword argument '(\w+)'|takes no (?:keyword )?arguments")


@dataclass(frozen=True)
class BuildOptions:
    """How to build a vector env from an id (`GymnasiumEnv`'s keywords of the same names)."""

    vectorization: str = "sync"
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    autoreset: str | None = None  # None: Gymnasium's default (next-step)
    render_size: int | None = None  # frames will be asked for at this size (videos)

    def __post_init__(self) -> None:
        if self.vectorization not in VECTORIZATIONS:
            raise ValueError(
                f"vectorization must be one of {VECTORIZATIONS}, got {self.vectorization!r}"
            )
        if self.autoreset is not None and self.autoreset not in AUTORESET_MODES:
            raise ValueError(
                f"autoreset must be one of {list(AUTORESET_MODES)} (or None: Gymnasium's "
                f"default), got {self.autoreset!r}"
            )


@contextlib.contextmanager
def gymnasium_build_context(env_id: str) -> Iterator[None]:
    """While a MuJoCo env `env_id` is built, report MuJoCo's warnings as Python warnings.

    MuJoCo prints each warning to stdout and appends it to `MUJOCO_LOG.TXT` in the working
    directory: under MuJoCo 4, Gymnasium's `half_cheetah.xml` (a deprecated compiler
    attribute) gives one per instance, 64 printed blocks for 64 envs. As a `RuntimeWarning`
    it is shown once and can be filtered. MuJoCo's handler is global: it is restored on exit.
    Envs that are not MuJoCo's (by their entry point), and async workers, are left alone.
    """
    try:
        entry_point = str(gymnasium.spec(env_id).entry_point)
    except gymnasium.error.Error:  # an unknown id: `make_vec` reports it
        entry_point = ""
    if "mujoco" not in entry_point and "mujoco" not in sys.modules:
        yield
        return
    try:
        import mujoco
    except ImportError:  # Gymnasium names the missing extra when it builds the env
        yield
        return

    messages: list[str] = []  # the handler runs inside MuJoCo's C code: it must not raise
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(messages.append)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)
    for message, count in collections.Counter(messages).items():  # distinct, in order
        times = f" ({count} times)" if count > 1 else ""
        warnings.warn(f"gymnasium:{env_id}: MuJoCo: {message}{times}", RuntimeWarning, stacklevel=3)


def flatten_if_discrete(env: gymnasium.Env) -> gymnasium.Env:
    """`env` with discrete observations flattened (one-hot, Gymnasium's `FlattenObservation`),
    other envs as they are: what `make_vec` wraps each instance in."""
    return FlattenObservation(env) if needs_flattening(env.observation_space) else env


class BuiltEnv(NamedTuple):
    """A vector env built from an id, and why each way of building it to render frames
    failed where all did (it was then built without a render mode; else empty)."""

    envs: VectorEnv
    render_failures: tuple[str, ...]


def build_vector_env(env_id: str, num_envs: int, options: BuildOptions) -> BuiltEnv:
    """`gymnasium.make_vec` of `num_envs` instances of `env_id`, built to render frames where
    the env can (see `_render_attempts`)."""
    if num_envs <= 0:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
    kwargs = dict(options.env_kwargs)
    if options.max_episode_steps is not None:
        kwargs["max_episode_steps"] = options.max_episode_steps
    vector_kwargs = {}
    if options.autoreset is not None:
        if options.vectorization not in ("sync", "async"):
            raise GymnasiumBridgeError(
                f"gymnasium:{env_id}: autoreset applies to vectorization 'sync' or 'async'; "
                f"a {options.vectorization!r} env has its own auto-reset mode"
            )
        vector_kwargs["autoreset_mode"] = AUTORESET_MODES[options.autoreset]

    if options.vectorization in ("sync", "async"):  # a vector entry point takes no wrappers
        wrapping: dict[str, Any] = {"wrappers": [flatten_if_discrete]}
    else:
        wrapping = {}

    def make(**extra: Any) -> VectorEnv:
        return gymnasium.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=options.vectorization,
            vector_kwargs=vector_kwargs,
            **wrapping,
            **kwargs,
            **extra,
        )

    try:
        with gymnasium_build_context(env_id):
            if "render_mode" in kwargs:  # the user's choice
                return BuiltEnv(make(), ())
            return _make_with_frames(make, _render_attempts(kwargs, options.render_size))
    except gymnasium.error.Error as exc:  # an unknown id
        raise GymnasiumBridgeError(f"gymnasium:{env_id}: {exc}") from None
    except TypeError as exc:
        error = _option_not_taken(env_id, options, exc)
        if error is exc:  # no keyword of ours: a fault of the env's own, raised as it is
            raise
        raise error from None


def _refused(exc: TypeError, offered: Collection[str]) -> list[str]:
    """Which of the keywords `offered` a constructor refused, by `exc`: the one it names, or
    all where it takes none; none where `exc` is about something else."""
    match = _REFUSED.search(str(exc))
    if match is None:
        return []
    return list(offered) if match[1] is None else [k for k in offered if k == match[1]]


def _make_with_frames(make: Callable[..., VectorEnv], attempts: list[dict[str, Any]]) -> BuiltEnv:
    """Build with the first of `attempts` whose render keywords the env's constructor takes
    (the last has none). A `TypeError` refusing one of them means the env cannot render that
    way, and the next is tried; any other error is raised."""
    failures = []
    for extra in attempts[:-1]:
        try:
            return BuiltEnv(make(**extra), ())
        except TypeError as exc:
            refused = _refused(exc, extra)
            if not refused:
                raise
            shown = ", ".join(f"{key}={value!r}" for key, value in extra.items())
            taken = ", ".join(repr(key) for key in refused)
            failures.append(f"{shown}: the constructor does not take {taken}")
    return BuiltEnv(make(**attempts[-1]), tuple(failures))


def _option_not_taken(env_id: str, options: BuildOptions, exc: TypeError) -> Exception:
    """An error naming the option whose keyword the env's constructor refused in `exc`;
    `exc` itself where it refused none of ours."""
    refused = _refused(exc, options.env_kwargs)
    if refused:
        taken = ", ".join(repr(key) for key in refused)
        return GymnasiumBridgeError(
            f"env.options.env_kwargs: gymnasium:{env_id} does not take {taken} ({exc})"
        )
    if options.max_episode_steps is not None and _refused(exc, ["max_episode_steps"]):
        return GymnasiumBridgeError(
            f"env.options.max_episode_steps: gymnasium:{env_id} with vectorization "
            f"{options.vectorization!r} does not take it ({exc})"
        )
    return exc


def _render_attempts(kwargs: Mapping[str, Any], render_size: int | None) -> list[dict[str, Any]]:
    """The render keywords to build with, in order, the last none at all: frames for videos
    where the env can render; at the video's size where the env renders offscreen at a fixed
    size (MuJoCo: 480 x 480 unless told)."""
    attempts: list[dict[str, Any]] = [{"render_mode": "rgb_array"}, {}]
    if render_size is not None and not {"width", "height"} & set(kwargs):
        sized = {"render_mode": "rgb_array", "width": render_size, "height": render_size}
        attempts.insert(0, sized)
    return attempts
