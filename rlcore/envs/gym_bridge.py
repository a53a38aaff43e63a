"""Any Gymnasium environment behind the batched env contract (`BatchedEnv`).

`GymnasiumEnv` wraps a Gymnasium vector env (built from an env id with `gymnasium.make_vec`:
`sync`, `async`, or the env's own numpy-vectorised `vector_entry_point`; or one you built)
and presents it as N instances on a torch device, writing every step into the rollout slot
it is handed with one host-to-tensor copy per field (through pinned staging memory when the
device is CUDA).

Spaces:

- actions: `Discrete` (int64 indices, offset by the space's `start`) or a 1-D `Box`. Box
  actions are clipped to the bounds (`actions="clip"`, default) or mapped from [-1, 1]
  affinely onto them (`actions="rescale"`, for policies that act in a unit box);
- observations: named entries (`rlcore.observations`). A `Box` is one entry: `image` if it
  is an image (uint8, rank 3), else `state`, float32, flattened row-major (a 1-D Box is
  copied as it is). A `Dict` of `Box`es is one entry per key, in the Dict space's own key
  order (Gymnasium sorts the keys of a plain dict): an image if uint8 of rank 3, else a
  float32 vector, flattened row-major. Every other dtype, and uint8 of another rank, is
  stored as float32. A Dict key names its entry, and entries name files in datasets: keys
  must be 1 to 64 of `A-Z a-z 0-9 _`;
- images are stored channel-first, uint8 `[C, H, W]`. Gymnasium's are usually channel-last
  (`AddRenderObservation`, Atari): an image whose last dimension is 1, 3 or 4 (grey, RGB,
  RGBA) and whose first is not is read as `[H, W, C]` and transposed as it is written; any
  other is read as `[C, H, W]` and passes as it is (so a 3 x H x 3 image is channel-first).

Anything else (`Tuple`, `Text`, a Dict entry that is not a Box, `MultiDiscrete` actions, a
Box action with more than one dimension) fails at construction with an error naming the env
and the space.

Auto-reset, per the contract (after a `done`, `next_obs` is the first observation of the
next episode; the true final observation is in `final_obs`), for each Gymnasium 1.x mode:

- `next-step` (Gymnasium's default, and what `sync` and `async` build unless `autoreset`
  says otherwise): the step after a `done` resets the instance inside the vector env and
  ignores its action. The bridge reports that step as an invalid transition (`slot.valid`
  false): the collector keeps it out of every loss and every statistic. Its `next_obs` row
  at the `done` holds the final observation until then. Of the three modes this is the
  cheapest per real transition (`benchmarks/gym_bridge.py`): one wasted step per episode
  costs less than Gymnasium's same-step bookkeeping of final observations on every `done`
  (~10% of a `SyncVectorEnv` CartPole step);
- `same-step` (`autoreset="same-step"`, and chosen by `make_env` for grouped episodes,
  which need every step to be a transition): the vector env resets within the step; the
  final observation comes from the step's `info["final_obs"]`;
- `disabled`, on `SyncVectorEnv` / `AsyncVectorEnv`: the step's observation of a done
  instance *is* its final observation; the bridge then resets exactly those instances
  (`reset(options={"reset_mask": done})`).

Seeding: `reset(seed=s)` draws one seed per instance from a generator seeded with `s`, so the
same seed gives the same trajectories; partial and group resets draw from it too, and a
group's instances get the same seed, so they start from the same state (deterministic
resets are all a Gymnasium env promises). Group and partial resets need a vector env that can
reset chosen instances (`sync` or `async`).

A Gymnasium env's internal state cannot be saved in general: `state_dict()` keeps the seed
generator, and `load_state_dict()` restarts every instance's episode from it (resuming a
run is not bit-exact with this bridge, unlike with the builtin envs).
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium
import gymnasium.spaces as spaces
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv, HostViews, StepSlot, check_group_size
from rlcore.envs.gym_spaces import (
    GymnasiumBridgeError,
    action_space_of,
    observation_layout,
)
from rlcore.envs.mujoco_gl import prefer_offscreen_gl, rendering_unavailable
from rlcore.observations import FLAT_KEY, allocate

VECTORIZATIONS = ("sync", "async", "vector_entry_point")
AUTORESET_MODES = {"next-step": AutoresetMode.NEXT_STEP, "same-step": AutoresetMode.SAME_STEP}
ACTION_MODES = ("clip", "rescale")
_SEED_BOUND = 2**31 - 1


@contextlib.contextmanager
def gymnasium_build_context(env_id: str) -> Iterator[None]:
    """While a MuJoCo env `env_id` is built, report MuJoCo's warnings as Python warnings
    (and pick offscreen rendering where there is no display: `prefer_offscreen_gl`).

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
    prefer_offscreen_gl()  # before MuJoCo's import: frames for videos on headless machines
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


def _build(
    env_id: str,
    num_envs: int,
    vectorization: str,
    env_kwargs: Mapping[str, Any],
    max_episode_steps: int | None,
    autoreset: str | None,
    render_size: int | None = None,
) -> VectorEnv:
    kwargs = dict(env_kwargs)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    vector_kwargs = {}
    if autoreset is not None:
        if vectorization not in ("sync", "async"):
            raise GymnasiumBridgeError(
                f"gymnasium:{env_id}: autoreset applies to vectorization 'sync' or 'async'; "
                f"a {vectorization!r} env has its own auto-reset mode"
            )
        vector_kwargs["autoreset_mode"] = AUTORESET_MODES[autoreset]

    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        # Headless: pygame-rendered envs (classic control) draw offscreen; without this,
        # SDL prints "error: XDG_RUNTIME_DIR is invalid", which reads like one of ours.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

    def make(**extra: Any) -> VectorEnv:
        return gymnasium.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization,
            vector_kwargs=vector_kwargs,
            **kwargs,
            **extra,
        )

    try:
        with gymnasium_build_context(env_id):
            if "render_mode" in kwargs:
                return make()
            # Frames for videos, where the env can render; at the video's size where the
            # env renders offscreen at a fixed size (MuJoCo: 480 x 480 unless told).
            sized = render_size is not None and not {"width", "height"} & set(kwargs)
            attempts = [{"render_mode": "rgb_array"}, {}]
            if sized:
                attempts.insert(0, {"render_mode": "rgb_array", "width": render_size,
                                    "height": render_size})  # fmt: skip
            for extra in attempts[:-1]:
                try:
                    return make(**extra)
                except TypeError:  # a constructor without these keywords
                    continue
            return make()
    except gymnasium.error.Error as exc:  # an unknown id
        raise GymnasiumBridgeError(f"gymnasium:{env_id}: {exc}") from None
    except TypeError as exc:  # a keyword the env's constructor does not take
        raise GymnasiumBridgeError(
            f"env.options.env_kwargs: gymnasium:{env_id} does not take {dict(env_kwargs)} ({exc})"
        ) from None


def _plain_mujoco_scenes(instances: Sequence[gymnasium.Env]) -> None:
    """Turn off shadows and reflections in Gymnasium's MuJoCo offscreen renderers, as the
    native envs do: software GL (OSMesa, no GPU) draws a frame ~5x slower with them.

    Reaches into Gymnasium's `MujocoRenderer` (its `_get_viewer`, stable since 0.29); an
    env rendered some other way is left as it is.
    """
    import mujoco

    for instance in instances:
        renderer = getattr(instance.unwrapped, "mujoco_renderer", None)
        try:
            scene = renderer._get_viewer("rgb_array").scn  # type: ignore[union-attr]
            scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        except Exception:  # not Gymnasium's MuJoCo renderer: nothing to turn off
            continue


class GymnasiumEnv(BatchedEnv):
    """A Gymnasium vector env as a `BatchedEnv` on `device` (see the module docstring)."""

    def __init__(
        self,
        env_id: str | None = None,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        *,
        vectorization: str = "sync",
        env_kwargs: Mapping[str, Any] | None = None,
        max_episode_steps: int | None = None,
        actions: str = "clip",
        autoreset: str | None = None,
        vector_env: VectorEnv | None = None,
        render_size: int | None = None,
    ) -> None:
        if (env_id is None) == (vector_env is None):
            raise ValueError("give exactly one of a Gymnasium env id and a vector env")
        if vectorization not in VECTORIZATIONS:
            raise ValueError(
                f"vectorization must be one of {VECTORIZATIONS}, got {vectorization!r}"
            )
        if actions not in ACTION_MODES:
            raise ValueError(f"actions must be one of {ACTION_MODES}, got {actions!r}")
        if autoreset is not None and autoreset not in AUTORESET_MODES:
            raise ValueError(
                f"autoreset must be one of {list(AUTORESET_MODES)} (or None: Gymnasium's "
                f"default), got {autoreset!r}"
            )
        if autoreset is not None and vector_env is not None:
            raise ValueError("autoreset applies to envs built from an id; a vector env has its own")
        if vector_env is None:
            if num_envs <= 0:
                raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
            assert env_id is not None
            vector_env = _build(
                env_id, num_envs, vectorization, env_kwargs or {}, max_episode_steps, autoreset,
                render_size,
            )  # fmt: skip
        self.envs = vector_env
        self._plain_scenes = False  # shadows and reflections turned off (see render)
        spec = getattr(vector_env, "spec", None)
        self.name = f"gymnasium:{env_id or (spec.id if spec else type(vector_env).__name__)}"
        self.num_envs = int(vector_env.num_envs)
        self.device = torch.device(device)
        try:
            self._layout = observation_layout(vector_env.single_observation_space, self.name)
            self.action_space = action_space_of(vector_env.single_action_space, self.name)
        except GymnasiumBridgeError:
            vector_env.close()
            raise
        self._action_offset = int(getattr(vector_env.single_action_space, "start", 0))
        self._rescale = actions == "rescale" and isinstance(self.action_space, spaces.Box)
        # A Box that is no image is one flat vector (the fast path); else named entries.
        first = self._layout[0]
        self._flat = first.key is None and first.name == FLAT_KEY
        # A Box of vectors arrives as [N, obs_dim] rows: copied without a reshape.
        rank = len(vector_env.single_observation_space.shape or ())
        self._plain_rows = self._flat and rank == 1
        self.observation_space = (
            first.space if self._flat else spaces.Dict([(e.name, e.space) for e in self._layout])
        )
        limit = max_episode_steps or (spec.max_episode_steps if spec is not None else None)
        if limit is None:
            vector_env.close()
            raise GymnasiumBridgeError(
                f"{self.name} has no time limit: pass max_episode_steps (evaluation needs one)"
            )
        self.max_episode_steps = int(limit)

        inner = getattr(vector_env, "unwrapped", vector_env)
        self._can_reset_some = isinstance(inner, SyncVectorEnv | AsyncVectorEnv)
        mode = vector_env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._mode = AutoresetMode(mode) if not isinstance(mode, AutoresetMode) else mode
        # Next-step envs waste the step after a done (still the cheapest: module docstring).
        self.has_invalid_steps = self._mode == AutoresetMode.NEXT_STEP
        if self._mode == AutoresetMode.DISABLED and not self._can_reset_some:
            raise GymnasiumBridgeError(
                f"{self.name}: autoreset mode 'disabled' needs a vector env that can reset "
                "chosen instances (SyncVectorEnv or AsyncVectorEnv)"
            )
        # Next-step resets still to come: the last step's `done` (by reference; never written).
        self._pending = np.zeros(self.num_envs, dtype=bool)
        # Where done instances reset, besides next-step (chosen once: `step` is the hot path).
        if self._mode == AutoresetMode.SAME_STEP:
            self._finish = self._finish_same_step
        else:
            self._finish = self._finish_by_masked_reset

        self.final_obs = allocate(self.obs_spec, (self.num_envs,), self.device)
        # Named entries write through numpy views of each slot's entries, made once per slot
        # (by `id`; an entry leaves with its slot, before the id can be reused).
        self._slot_views: dict[int, dict[str, np.ndarray]] = {}
        self._staging: HostViews | None = None
        # On CPU, numpy views of `final_obs` (and of its one entry, for a flat env).
        self._final_host: dict[str, np.ndarray] | None = None
        self._final_rows: np.ndarray | None = None
        if self.device.type == "cpu":
            self._final_host = {key: value.numpy() for key, value in self.final_obs.items()}
            self._final_rows = self._final_host[FLAT_KEY] if self._flat else None
        else:
            self._stage_on_host(pin=self.device.type == "cuda")
        self._discrete = isinstance(self.action_space, spaces.Discrete)
        n, a = self.num_envs, self.action_dim
        self._action_shape = (n,) if self._discrete else (n, a)
        self._action_dtype = torch.int64 if self._discrete else torch.float32
        self._host_dtype = np.dtype(np.int64 if self._discrete else np.float32)
        if not self._discrete:
            self._low, self._high = self.action_space.low, self.action_space.high
            self._half_range = 0.5 * (self._high - self._low)
            self._middle = self._low + self._half_range
        self._rng = np.random.default_rng()
        # The latest observation per entry, on the host: `reset`'s, or the last step's
        # (numpy views of its slot or of staging).
        self._last_obs = self._host_entries()

    def _host_entries(self) -> dict[str, np.ndarray]:
        """Zeroed host arrays [N, ...] for every entry, as stored."""
        return {
            e.name: np.zeros((self.num_envs, *e.space.shape), e.space.dtype) for e in self._layout
        }

    def _stage_on_host(self, pin: bool) -> None:
        """Off the CPU: stage results in (pinned) host memory, one buffer per field and per
        entry, copied to the device asynchronously; final observations are written there."""
        n = self.num_envs

        def buffer(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.empty(n, *shape, dtype=dtype, pin_memory=pin)

        self._staged_obs = {
            key: buffer(*e.shape, dtype=e.dtype) for key, e in self.obs_spec.items()
        }
        self._staged_entries = {key: t.numpy() for key, t in self._staged_obs.items()}
        # Reward and flags, by their `StepSlot` (and `HostViews`) field names.
        flags = ("terminated", "truncated", "done", "valid")[: 4 if self.has_invalid_steps else 3]
        self._staged_fields = {"reward": buffer()} | {
            name: buffer(dtype=torch.bool) for name in flags
        }
        flat = self._staged_entries[FLAT_KEY] if self._flat else np.empty(0, np.float32)
        fields = {name: staged.numpy() for name, staged in self._staged_fields.items()}
        self._staging = HostViews(next_obs=flat, **fields)
        # The host must not rewrite staging before the previous step's copies have run.
        self._copied = torch.cuda.Event() if pin else None
        self._final_host = self._final_rows = None

    # --- conversions ---------------------------------------------------------------------

    def _flatten_into(self, obs: Any, out: np.ndarray) -> None:
        """Write a flat env's batch of observations into `out` ([N, obs_dim] float32)."""
        out[...] = obs if self._plain_rows else np.reshape(obs, out.shape)

    def _write_entries(self, obs: Any, out: Mapping[str, np.ndarray]) -> None:
        """Write a batch of observations into host arrays [N, ...] per entry, as stored."""
        for entry in self._layout:
            value = obs if entry.key is None else obs[entry.key]
            np.copyto(out[entry.name], entry.stored(value), casting="unsafe")

    def _write_obs(self, obs: Any, out: np.ndarray | Mapping[str, np.ndarray]) -> None:
        """Write a batch of observations into the flat rows or the per-entry arrays `out`."""
        if isinstance(out, np.ndarray):
            self._flatten_into(obs, out)
        else:
            self._write_entries(obs, out)

    def _entry_views(self, slot: StepSlot) -> dict[str, np.ndarray]:
        """numpy views of a CPU slot's observation entries, made once (as `host_views`)."""
        views = self._slot_views.get(id(slot))
        if views is None:
            views = {key: slot.next_obs[key].numpy() for key in self.obs_spec}
            self._slot_views[id(slot)] = views
            weakref.finalize(slot, self._slot_views.pop, id(slot), None)
        return views

    def _host_action(self, action: torch.Tensor, slot: StepSlot) -> np.ndarray:
        """The env's actions in numpy: indices offset by the space's `start`, Box actions
        clipped or rescaled into a new array (the caller's tensor is never modified)."""
        if action is slot.action and self._staging is None:
            # The collector's rollout column on CPU, read through its numpy view with no
            # call into torch (one costs a numpy env's step microseconds in caches).
            host = slot.host_action
            if host.dtype is not self._host_dtype or host.shape != self._action_shape:
                host = self._checked_host_action(action)
        else:
            host = self._checked_host_action(action)
        if self._discrete:
            return host + self._action_offset if self._action_offset else host
        if self._rescale:
            return np.clip(host, -1.0, 1.0) * self._half_range + self._middle
        clipped = np.maximum(host, self._low)
        return np.minimum(clipped, self._high, out=clipped)

    def _checked_host_action(self, action: torch.Tensor) -> np.ndarray:
        if action.shape != self._action_shape:
            if not (self._discrete and action.shape == (self.num_envs, 1)):
                expected = list(self._action_shape)
                raise GymnasiumBridgeError(
                    f"{self.name}: actions must have shape {expected} for {self.action_space}, "
                    f"got {list(action.shape)}"
                )
            action = action.reshape(self.num_envs)
        if action.dtype != self._action_dtype or not action.is_cpu:
            action = action.to("cpu", self._action_dtype)
        return action.numpy()

    # --- the contract ----------------------------------------------------------------

    def _seeds(self, count: int) -> list[int]:
        return [int(s) for s in self._rng.integers(0, _SEED_BOUND, size=count)]

    def reset(
        self,
        seed: int | None = None,
        env_ids: torch.Tensor | None = None,
        group_size: int = 1,
    ) -> TensorDict:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        n = self.num_envs
        mask = np.ones(n, dtype=bool)
        if env_ids is not None:
            mask = np.zeros(n, dtype=bool)
            mask[env_ids.to("cpu", torch.long).numpy()] = True
        count = int(mask.sum())
        check_group_size(count, group_size)
        partial = not mask.all()
        if (partial or group_size > 1) and not self._can_reset_some:
            raise GymnasiumBridgeError(
                f"{self.name}: {type(self.envs).__name__} cannot reset chosen instances or "
                "give groups a shared start; use vectorization 'sync' or 'async'"
            )
        if count == 0:
            return self._current_obs()
        group_seeds = np.repeat(self._seeds(count // group_size), group_size)
        if not self._can_reset_some:  # numpy-vectorised: one seed for the batch
            obs, _ = self.envs.reset(seed=int(group_seeds[0]))
        elif partial:
            seeds: list[int | None] = [None] * n
            for i, s in zip(np.flatnonzero(mask), group_seeds, strict=True):
                seeds[i] = int(s)
            obs, _ = self.envs.reset(seed=seeds, options={"reset_mask": mask})
        else:
            obs, _ = self.envs.reset(seed=[int(s) for s in group_seeds])
        self._pending = self._pending & ~mask  # a new array: `_pending` may view a rollout
        self._last_obs = self._host_entries()
        self._write_obs(obs, self._last_obs[FLAT_KEY] if self._flat else self._last_obs)
        return self._current_obs()

    def _current_obs(self) -> TensorDict:
        """A new observation TensorDict of the latest observations (copies, not shared)."""
        entries = {
            key: torch.from_numpy(np.array(value)).to(self.device)
            for key, value in self._last_obs.items()
        }
        return TensorDict(entries, batch_size=[self.num_envs], device=self.device)

    def step(self, action: torch.Tensor, slot: StepSlot) -> None:
        obs, reward, terminated, truncated, info = self.envs.step(self._host_action(action, slot))
        if self._staging is None:  # CPU: numpy views of the rollout slot, one copy per field
            host = slot.host_views
        else:
            host = self._staging
            if self._copied is not None:
                self._copied.synchronize()
        done = host.done
        # Next-step: this step reset the pending instances. Only a rollout's slot has `valid`
        # (evaluation's has none); read `_pending` before `done` is written (it may alias it).
        if self.has_invalid_steps and host.valid is not None:
            np.logical_not(self._pending, host.valid)
        host.terminated[...] = terminated  # each a single numpy copy (casting as needed)
        host.truncated[...] = truncated
        np.logical_or(host.terminated, host.truncated, done)
        host.reward[...] = reward
        next_obs: np.ndarray | dict[str, np.ndarray]
        if self._flat:
            next_obs = host.next_obs
            if self._plain_rows:
                next_obs[...] = obs
            else:
                self._flatten_into(obs, next_obs)
            self._last_obs[FLAT_KEY] = next_obs
        else:  # named entries, each through its numpy view
            next_obs = self._entry_views(slot) if self._staging is None else self._staged_entries
            self._write_entries(obs, next_obs)
            self._last_obs = next_obs
        if self.has_invalid_steps:
            self._pending = done  # read before the next step writes its `done`
            self.final_obs = slot.next_obs  # the done rows of next_obs are the final ones
        else:
            self._finish(obs, info, next_obs, done)
        if self._staging is not None:
            for key, staged in self._staged_obs.items():
                slot.next_obs[key].copy_(staged, non_blocking=True)
            for name, staged in self._staged_fields.items():
                out = getattr(slot, name)
                if out is not None:  # `valid`: only a rollout's slot has it
                    out.copy_(staged, non_blocking=True)
            if self._copied is not None:
                self._copied.record()

    def _finish_same_step(
        self, obs: Any, info: dict[str, Any], next_obs: Any, done: np.ndarray
    ) -> None:
        """Keep the final observations of the done instances, from the step's info."""
        finals = info.get("final_obs")  # Gymnasium adds it when some instance is done
        if finals is None:
            return
        if self._final_rows is not None:  # a flat env on CPU: a row at a time
            for i in np.flatnonzero(done).tolist():
                self._final_rows[i] = finals[i] if self._plain_rows else np.reshape(finals[i], -1)
        elif done.any():
            self._write_final(self._final_from_info(finals, done), done)

    def _finish_by_masked_reset(
        self, obs: Any, info: dict[str, Any], next_obs: Any, done: np.ndarray
    ) -> None:
        """Autoreset disabled: keep the done instances' observations, then reset them."""
        if not done.any():
            return
        # The step's obs of a done instance is its final obs; then reset exactly those.
        views = {FLAT_KEY: next_obs} if self._flat else next_obs
        if self._final_host is not None:
            for key, view in views.items():  # rows of running instances are stale
                np.copyto(self._final_host[key], view)
        else:
            self._write_final({key: view[done] for key, view in views.items()}, done)
        seeds = iter(self._seeds(int(done.sum())))
        obs, _ = self.envs.reset(
            seed=[next(seeds) if d else None for d in done], options={"reset_mask": done.copy()}
        )
        self._write_obs(obs, next_obs)

    def _final_from_info(self, finals: Any, done: np.ndarray) -> dict[str, np.ndarray]:
        """Same-step mode: the done instances' final observations per entry, as stored, from
        `info["final_obs"]` (an object array of observations, or for Dict spaces a dict of
        per-key arrays)."""
        rows = np.flatnonzero(done)

        def batch(key: str | None) -> Any:
            if key is None:
                return np.stack([finals[i] for i in rows])
            if isinstance(finals, Mapping):
                return np.asarray(finals[key])[rows]
            return np.stack([finals[i][key] for i in rows])

        return {entry.name: entry.stored(batch(entry.key)) for entry in self._layout}

    def _write_final(self, rows: Mapping[str, np.ndarray], done: np.ndarray) -> None:
        """Write the done instances' final observations `rows` ([done count, ...] per entry)."""
        if self._final_host is not None:
            for key, value in rows.items():
                self._final_host[key][done] = value
            return
        ids = torch.from_numpy(np.flatnonzero(done)).to(self.device)
        for key, value in rows.items():
            target = self.final_obs[key]
            target[ids] = torch.from_numpy(np.asarray(value)).to(self.device, target.dtype)

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        unavailable = rendering_unavailable() if "mujoco" in sys.modules else None
        if unavailable is not None:
            raise GymnasiumBridgeError(f"{self.name} cannot render: {unavailable}")
        ids = None if env_ids is None else env_ids.to("cpu", torch.long).tolist()
        instances = getattr(self.envs, "envs", None)  # sync: render only the envs asked for
        if not self._plain_scenes and instances is not None and "mujoco" in sys.modules:
            _plain_mujoco_scenes(instances)
            self._plain_scenes = True
        try:
            if ids is not None and instances is not None:
                frames = [instances[i].render() for i in ids]
                ids = None
            else:
                frames = self.envs.render()
        except gymnasium.error.DependencyNotInstalled as exc:
            raise GymnasiumBridgeError(f"{self.name} cannot render: {exc}") from None
        except Exception as exc:  # e.g. MuJoCo without an OpenGL platform
            raise GymnasiumBridgeError(
                f"{self.name} cannot render: {exc} (MuJoCo renders offscreen with "
                "MUJOCO_GL=egl or MUJOCO_GL=osmesa)"
            ) from exc
        if frames is None or any(f is None for f in frames):
            raise GymnasiumBridgeError(f"{self.name} does not render (render_mode rgb_array)")
        batch = torch.from_numpy(np.stack([np.asarray(f) for f in frames])[..., :3].copy())
        if ids is not None:
            batch = batch[ids]
        resized = torch.nn.functional.interpolate(
            batch.permute(0, 3, 1, 2).float(), size=(size, size), mode="area"
        )
        return resized.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).to(self.device)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The seed the episodes restart from on `load_state_dict` (see the module docstring)."""
        return {"seed": torch.tensor(int(self._rng.integers(0, _SEED_BOUND)))}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.reset(seed=int(state["seed"]))

    def close(self) -> None:
        self.envs.close()
