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
- observations: any `Box` (flattened row-major), or a `Dict` of `Box`es, flattened entry by
  entry in the Dict space's own key order (Gymnasium sorts the keys of a plain dict), each
  entry row-major: `obs = concat(flatten(obs[k]) for k in space.keys())`.

Anything else (`Tuple`, `Text`, `MultiDiscrete` actions, a Box action with more than one
dimension) fails at construction with an error naming the env and the space.

Auto-reset, per the contract (after a `done`, `next_obs` is the first observation of the
next episode; the true final observation is in `final_obs`), for each Gymnasium 1.x mode:

- `same-step`: the vector env resets within the step; the final observation comes from the
  step's `info["final_obs"]`;
- `next-step` or `disabled`, on `SyncVectorEnv` / `AsyncVectorEnv`: the step's observation
  of a done instance *is* its final observation; the bridge then resets exactly those
  instances (`reset(options={"reset_mask": done})`), which also cancels a pending next-step
  reset, so the vector env's extra reset step never happens and never becomes a transition.
  Envs built here from an id use `disabled`.
- `next-step` on a numpy-vectorised env that cannot reset chosen instances (e.g.
  `CartPoleVectorEnv`): the step after a `done` resets the instance inside the vector env
  and ignores its action. The bridge reports that step as an invalid transition
  (`slot.valid` false): the collector keeps it out of every loss and every statistic. Its
  `next_obs` row at the `done` holds the final observation until then.

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

from collections.abc import Mapping
from typing import Any

import gymnasium
import gymnasium.spaces as spaces
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from rlcore.envs.base import BatchedEnv, StepSlot, check_group_size

VECTORIZATIONS = ("sync", "async", "vector_entry_point")
ACTION_MODES = ("clip", "rescale")
_SEED_BOUND = 2**31 - 1


def slot_fields(slot: StepSlot) -> tuple[torch.Tensor, ...]:
    return slot.next_obs, slot.reward, slot.terminated, slot.truncated, slot.done


class GymnasiumBridgeError(ValueError):
    """The Gymnasium env cannot be presented as a batched env (message names env and space)."""


def _flat_size(space: spaces.Box) -> int:
    return int(np.prod(space.shape, dtype=np.int64)) if space.shape else 1


def observation_layout(space: spaces.Space, env: str) -> list[tuple[str | None, int]]:
    """(Dict key or None, flat width) per observation entry, in flattening order."""
    if isinstance(space, spaces.Box):
        return [(None, _flat_size(space))]
    if isinstance(space, spaces.Dict):
        layout = []
        for key, sub in space.spaces.items():
            if not isinstance(sub, spaces.Box):
                raise GymnasiumBridgeError(
                    f"{env}: observation space entry {key!r} is {sub}; only Box entries of a "
                    f"Dict observation space are supported"
                )
            layout.append((key, _flat_size(sub)))
        return layout
    raise GymnasiumBridgeError(
        f"{env}: unsupported observation space {space}; supported: Box, or Dict of Box"
    )


def _flat_bounds(space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    parts = [space] if isinstance(space, spaces.Box) else list(space.spaces.values())
    low = np.concatenate([np.asarray(p.low, dtype=np.float32).reshape(-1) for p in parts])
    high = np.concatenate([np.asarray(p.high, dtype=np.float32).reshape(-1) for p in parts])
    return low, high


def action_space_of(space: spaces.Space, env: str) -> spaces.Box | spaces.Discrete:
    if isinstance(space, spaces.Discrete):
        return spaces.Discrete(int(space.n))
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return spaces.Box(space.low, space.high, dtype=np.float32)
    raise GymnasiumBridgeError(
        f"{env}: unsupported action space {space}; supported: Discrete, or a 1-D Box"
    )


def _build(
    env_id: str,
    num_envs: int,
    vectorization: str,
    env_kwargs: Mapping[str, Any],
    max_episode_steps: int | None,
) -> VectorEnv:
    kwargs = dict(env_kwargs)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    vector_kwargs = {}
    if vectorization in ("sync", "async"):
        vector_kwargs["autoreset_mode"] = AutoresetMode.SAME_STEP

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
        if "render_mode" in kwargs:
            return make()
        try:  # frames for videos, where the env can render
            return make(render_mode="rgb_array")
        except TypeError:  # an env whose constructor takes no render_mode
            return make()
    except (gymnasium.error.Error, TypeError) as exc:  # unknown id, or a bad env kwarg
        raise GymnasiumBridgeError(f"gymnasium:{env_id}: {exc}") from None


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
        vector_env: VectorEnv | None = None,
    ) -> None:
        if (env_id is None) == (vector_env is None):
            raise ValueError("give exactly one of a Gymnasium env id and a vector env")
        if vectorization not in VECTORIZATIONS:
            raise ValueError(
                f"vectorization must be one of {VECTORIZATIONS}, got {vectorization!r}"
            )
        if actions not in ACTION_MODES:
            raise ValueError(f"actions must be one of {ACTION_MODES}, got {actions!r}")
        if vector_env is None:
            if num_envs <= 0:
                raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
            assert env_id is not None
            vector_env = _build(
                env_id, num_envs, vectorization, env_kwargs or {}, max_episode_steps
            )
        self.envs = vector_env
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
        obs_dim = sum(width for _, width in self._layout)
        low, high = _flat_bounds(vector_env.single_observation_space)
        self.observation_space = spaces.Box(low, high, shape=(obs_dim,), dtype=np.float32)
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
        # Next-step envs that cannot reset chosen instances waste the step after a done.
        self.has_invalid_steps = self._mode == AutoresetMode.NEXT_STEP and not self._can_reset_some
        if self._mode == AutoresetMode.DISABLED and not self._can_reset_some:
            raise GymnasiumBridgeError(
                f"{self.name}: autoreset mode 'disabled' needs a vector env that can reset "
                "chosen instances (SyncVectorEnv or AsyncVectorEnv)"
            )
        self._pending = np.zeros(self.num_envs, dtype=bool)  # next-step resets still to come

        # Off the CPU, results are staged in pinned host memory and copied asynchronously.
        self._staging: tuple[np.ndarray, ...] | None = None
        if self.device.type != "cpu":
            n, pin = self.num_envs, self.device.type == "cuda"
            flags = [torch.empty(n, dtype=torch.bool, pin_memory=pin) for _ in range(3)]
            self._staging_tensors = (
                torch.empty(n, obs_dim, pin_memory=pin),
                torch.empty(n, pin_memory=pin),
                *flags,
            )
            self._staging = tuple(t.numpy() for t in self._staging_tensors)
        self.final_obs = torch.zeros(self.num_envs, obs_dim, device=self.device)
        self._views: dict[int, tuple[StepSlot, tuple[np.ndarray, ...]]] = {}
        if isinstance(self.action_space, spaces.Box):
            self._low = torch.as_tensor(self.action_space.low, device=self.device)
            self._high = torch.as_tensor(self.action_space.high, device=self.device)
        self._rng = np.random.default_rng()
        self._last_obs = np.zeros((self.num_envs, obs_dim), dtype=np.float32)

    # --- conversions ---------------------------------------------------------------------

    def _flatten_into(self, obs: Any, out: np.ndarray) -> None:
        """Write the batch's observations, flattened, into `out` ([N, obs_dim] float32)."""
        n = self.num_envs
        if self._layout[0][0] is None:
            np.copyto(out, np.asarray(obs).reshape(n, -1), casting="unsafe")
            return
        start = 0
        for key, width in self._layout:
            part = np.asarray(obs[key]).reshape(n, -1)
            np.copyto(out[:, start : start + width], part, casting="unsafe")
            start += width

    def _flatten(self, obs: Any) -> np.ndarray:
        out = np.empty((self.num_envs, self.obs_dim), dtype=np.float32)
        self._flatten_into(obs, out)
        return out

    def _to_host_action(self, action: torch.Tensor) -> np.ndarray:
        if isinstance(self.action_space, spaces.Discrete):
            if action.shape != (self.num_envs,) and action.shape != (self.num_envs, 1):
                raise GymnasiumBridgeError(
                    f"{self.name}: actions must have shape [{self.num_envs}] for "
                    f"{self.action_space}, got {list(action.shape)}"
                )
            if action.dim() != 1:
                action = action.reshape(self.num_envs)
            if action.device.type != "cpu" or action.dtype != torch.int64:
                action = action.to("cpu", torch.int64)
            indices = action.numpy()
            return indices + self._action_offset if self._action_offset else indices
        if action.shape != (self.num_envs, self.action_dim):
            raise GymnasiumBridgeError(
                f"{self.name}: actions must have shape [{self.num_envs}, {self.action_dim}] "
                f"for {self.action_space}, got {list(action.shape)}"
            )
        if self._rescale:
            action = self._low + (action.clamp(-1.0, 1.0) + 1.0) * 0.5 * (self._high - self._low)
        else:
            action = torch.maximum(torch.minimum(action, self._high), self._low)
        return action.to("cpu", torch.float32).numpy()

    # --- the contract ----------------------------------------------------------------

    def _seeds(self, count: int) -> list[int]:
        return [int(s) for s in self._rng.integers(0, _SEED_BOUND, size=count)]

    def reset(
        self,
        seed: int | None = None,
        env_ids: torch.Tensor | None = None,
        group_size: int = 1,
    ) -> torch.Tensor:
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
        self._pending[mask] = False
        self._last_obs = self._flatten(obs)
        return torch.from_numpy(self._last_obs.copy()).to(self.device)

    def _current_obs(self) -> torch.Tensor:
        return torch.from_numpy(np.array(self._last_obs, dtype=np.float32)).to(self.device)

    def _host(self, slot: StepSlot) -> tuple[np.ndarray, ...]:
        """numpy arrays the step's results are written into: on CPU the rollout slot itself
        (numpy views, so each field is copied once, by numpy), on CUDA pinned staging.

        A collector hands the same T slots every rollout, so their views are made once.
        """
        if self._staging is not None:
            return self._staging
        cached = self._views.get(id(slot))
        if cached is not None and cached[0] is slot:
            return cached[1]
        views = tuple(field.numpy() for field in slot_fields(slot))
        if slot.valid is not None:
            views += (slot.valid.numpy(),)
        if len(self._views) > 4096:  # slots of a collector no longer in use
            self._views.clear()
        self._views[id(slot)] = (slot, views)
        return views

    def step(self, action: torch.Tensor, slot: StepSlot) -> None:
        obs, reward, terminated, truncated, info = self.envs.step(self._to_host_action(action))
        next_obs, reward_out, terminated_out, truncated_out, done, *valid = self._host(slot)
        np.copyto(terminated_out, terminated, casting="unsafe")
        np.copyto(truncated_out, truncated, casting="unsafe")
        np.logical_or(terminated_out, truncated_out, out=done)
        np.copyto(reward_out, reward, casting="unsafe")
        any_done = bool(done.any())
        if self._mode == AutoresetMode.SAME_STEP:
            self._flatten_into(obs, next_obs)
            if any_done:
                self._write_final(self._final_from_info(info, done), done)
        elif self._can_reset_some:
            if any_done:  # the step's obs of a done instance is its final obs
                self._flatten_into(obs, next_obs)
                self._write_final(next_obs[done], done)
                seeds = iter(self._seeds(int(done.sum())))
                obs, _ = self.envs.reset(
                    seed=[next(seeds) if d else None for d in done],
                    options={"reset_mask": done.copy()},
                )
            self._flatten_into(obs, next_obs)
        else:  # next-step without chosen resets: this step reset the pending instances
            if valid:  # CPU: a view of slot.valid
                np.logical_not(self._pending, out=valid[0])
            elif slot.valid is not None:
                slot.valid.copy_(torch.from_numpy(np.logical_not(self._pending)))
            self._flatten_into(obs, next_obs)
            if any_done:
                self._write_final(next_obs[done], done)
            self._pending = done.copy()
        self._last_obs = next_obs
        if self._staging is not None:
            for host, out in zip(self._staging_tensors, slot_fields(slot), strict=True):
                out.copy_(host, non_blocking=True)

    def _final_from_info(self, info: dict[str, Any], done: np.ndarray) -> np.ndarray:
        """Same-step mode: the done instances' final observations, from `info["final_obs"]`
        (an object array of observations, or for Dict spaces a dict of per-key arrays)."""
        finals = info["final_obs"]
        rows = np.flatnonzero(done)
        if self._layout[0][0] is None:  # an object array of per-instance observations
            return np.stack([finals[i] for i in rows]).reshape(rows.size, -1)

        def entry(i: int, key: str) -> np.ndarray:
            value = finals[key][i] if isinstance(finals, Mapping) else finals[i][key]
            return np.asarray(value, dtype=np.float32).reshape(-1)

        return np.stack([
            np.concatenate([entry(int(i), key) for key, _ in self._layout]) for i in rows
        ])  # fmt: skip

    def _write_final(self, rows_obs: np.ndarray, done: np.ndarray) -> None:
        if self.device.type == "cpu":
            self.final_obs.numpy()[done] = rows_obs
            return
        ids = torch.from_numpy(np.flatnonzero(done)).to(self.device)
        self.final_obs[ids] = torch.from_numpy(rows_obs).to(self.device)

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        try:
            frames = self.envs.render()
        except gymnasium.error.DependencyNotInstalled as exc:
            raise GymnasiumBridgeError(f"{self.name} cannot render: {exc}") from None
        except Exception as exc:  # e.g. MuJoCo without an OpenGL platform
            raise GymnasiumBridgeError(
                f"{self.name} cannot render: {exc} (MuJoCo renders offscreen with "
                "MUJOCO_GL=egl or MUJOCO_GL=osmesa)"
            ) from exc
        if frames is None:
            raise GymnasiumBridgeError(f"{self.name} does not render (render_mode rgb_array)")
        batch = torch.from_numpy(np.stack([np.asarray(f) for f in frames])[..., :3].copy())
        if env_ids is not None:
            batch = batch[env_ids.to("cpu", torch.long)]
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
