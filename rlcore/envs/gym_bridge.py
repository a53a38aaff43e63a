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

from rlcore.envs.base import BatchedEnv, StepSlot

VECTORIZATIONS = ("sync", "async", "vector_entry_point")
ACTION_MODES = ("clip", "rescale")
_SEED_BOUND = 2**31 - 1


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
        vector_kwargs["autoreset_mode"] = AutoresetMode.DISABLED

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
            raise ValueError("give either a Gymnasium env id or a vector env, not both")
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

        pin = self.device.type == "cuda"
        self._obs_host = torch.empty(self.num_envs, obs_dim, pin_memory=pin)
        self._flags_host = torch.empty(3, self.num_envs, dtype=torch.bool, pin_memory=pin)
        self._reward_host = torch.empty(self.num_envs, pin_memory=pin)
        self.final_obs = torch.zeros(self.num_envs, obs_dim, device=self.device)
        if isinstance(self.action_space, spaces.Box):
            self._low = torch.as_tensor(self.action_space.low, device=self.device)
            self._high = torch.as_tensor(self.action_space.high, device=self.device)
        self._rng = np.random.default_rng()
        self._last_obs = np.zeros((self.num_envs, obs_dim), dtype=np.float32)

    # --- conversions ---------------------------------------------------------------------

    def _flatten(self, obs: Any, rows: np.ndarray | None = None) -> np.ndarray:
        """The batch's observations as one float32 [N (or rows), obs_dim] array."""
        if self._layout[0][0] is None:
            flat = np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1)
            return flat if rows is None else flat[rows]
        parts = [np.asarray(obs[key], dtype=np.float32).reshape(self.num_envs, -1)
                 for key, _ in self._layout]  # fmt: skip
        flat = np.concatenate(parts, axis=1)
        return flat if rows is None else flat[rows]

    def _to_host_action(self, action: torch.Tensor) -> np.ndarray:
        if isinstance(self.action_space, spaces.Discrete):
            if action.shape != (self.num_envs,) and action.shape != (self.num_envs, 1):
                raise GymnasiumBridgeError(
                    f"{self.name}: actions must have shape [{self.num_envs}] for "
                    f"{self.action_space}, got {list(action.shape)}"
                )
            indices = action.reshape(self.num_envs).to("cpu", torch.int64).numpy()
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

    def _put(self, host: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(host, non_blocking=host.is_pinned())

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
        if group_size <= 0 or count % group_size != 0:
            raise ValueError(
                f"group_size must be a positive divisor of the number of reset envs "
                f"({count}), got {group_size}"
            )
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
        return torch.from_numpy(self._last_obs.copy()).to(self.device)

    def step(self, action: torch.Tensor, slot: StepSlot) -> None:
        obs, reward, terminated, truncated, info = self.envs.step(self._to_host_action(action))
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated
        if self._mode == AutoresetMode.SAME_STEP:
            if done.any():
                self._write_final(self._final_from_info(info, done), done)
        elif self._can_reset_some:
            if done.any():
                self._write_final(self._flatten(obs, done), done)
                seeds = iter(self._seeds(int(done.sum())))
                obs, _ = self.envs.reset(
                    seed=[next(seeds) if d else None for d in done],
                    options={"reset_mask": done},
                )
        else:  # next-step without chosen resets: this step reset the pending instances
            if slot.valid is not None:
                slot.valid.copy_(torch.from_numpy(~self._pending))
            if done.any():
                self._write_final(self._flatten(obs, done), done)
            self._pending = done
        flat = self._flatten(obs)
        self._last_obs = flat
        self._obs_host.copy_(torch.from_numpy(flat))
        self._reward_host.copy_(torch.from_numpy(np.asarray(reward, dtype=np.float32)))
        flags = self._flags_host.numpy()
        flags[0], flags[1], flags[2] = terminated, truncated, done
        self._put(self._obs_host, slot.next_obs)
        self._put(self._reward_host, slot.reward)
        self._put(self._flags_host[0], slot.terminated)
        self._put(self._flags_host[1], slot.truncated)
        self._put(self._flags_host[2], slot.done)

    def _final_from_info(self, info: dict[str, Any], done: np.ndarray) -> np.ndarray:
        """Same-step mode: the done instances' final observations, from `info["final_obs"]`
        (an object array of observations, or for Dict spaces a dict of per-key arrays)."""
        finals = info["final_obs"]

        def entry(i: int, key: str | None) -> np.ndarray:
            if key is None:
                value = finals[i]
            elif isinstance(finals, Mapping):
                value = finals[key][i]
            else:
                value = finals[i][key]
            return np.asarray(value, dtype=np.float32).reshape(-1)

        return np.stack([
            np.concatenate([entry(int(i), key) for key, _ in self._layout])
            for i in np.flatnonzero(done)
        ])  # fmt: skip

    def _write_final(self, rows_obs: np.ndarray, done: np.ndarray) -> None:
        ids = torch.from_numpy(np.flatnonzero(done)).to(self.device)
        self.final_obs[ids] = torch.from_numpy(rows_obs).to(self.device)

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        try:
            frames = self.envs.render()
        except gymnasium.error.DependencyNotInstalled as exc:
            raise GymnasiumBridgeError(f"{self.name} cannot render: {exc}") from None
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
