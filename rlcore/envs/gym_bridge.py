"""Any Gymnasium environment behind the batched env contract (`BatchedEnv`).

`GymnasiumEnv` wraps a Gymnasium vector env (built from an env id with `gymnasium.make_vec`:
`sync`, `async`, or the env's own numpy-vectorised `vector_entry_point`; or one you built)
and presents it as N instances on a torch device, writing every step into the rollout slot
it is handed with one host-to-tensor copy per field (through pinned staging memory when the
device is CUDA).

What each Gymnasium space becomes, and what is refused: `rlcore.envs.gym_spaces`. Building
the vector env from an id: `rlcore.envs.gym_build`. Frames: `rlcore.envs.gym_render`. Import
`GymnasiumEnv` and its `GymnasiumBridgeError` from here (the error is defined in `gym_spaces`,
whose functions raise it too).

Auto-reset, per the contract (after a `done`, `next_obs` is the first observation of the
next episode; the true final observation is in `final_obs`), for each Gymnasium 1.x mode:

- `next-step` (Gymnasium's default, and what `sync` and `async` build unless `autoreset`
  says otherwise): the step after a `done` resets the instance inside the vector env and
  ignores its action. The bridge reports that step as an invalid transition (`slot.valid`
  false): the collector keeps it out of every loss and every statistic. Its `next_obs` row
  at the `done` holds the final observation until then. Of the three modes this is the
  cheapest per real transition (`benchmarks/gym_bridge.py`): one wasted step per episode
  costs less than Gymnasium's same-step bookkeeping of final observations on every `done`,
  paid on every step;
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

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv, HostViews, StepSlot, check_group_size
from rlcore.envs.gym_build import BuildOptions, build_vector_env
from rlcore.envs.gym_render import Frames
from rlcore.envs.gym_spaces import (
    GymnasiumBridgeError,
    HostActions,
    check_action_mode,
    observation_layout,
)
from rlcore.observations import FLAT_KEY, allocate

__all__ = ["GymnasiumBridgeError", "GymnasiumEnv"]

_SEED_BOUND = 2**31 - 1


class GymnasiumEnv(BatchedEnv):
    """A Gymnasium vector env as a `BatchedEnv` on `device` (see the module docstring)."""

    steps_on_host = True  # numpy envs: every step's results come through the host

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
        # Every value is checked before anything is built, whoever builds the vector env.
        options = BuildOptions(
            vectorization, dict(env_kwargs or {}), max_episode_steps, autoreset, render_size
        )
        check_action_mode(actions)
        render_failures: tuple[str, ...] = ()
        if vector_env is None:
            assert env_id is not None
            vector_env, render_failures = build_vector_env(env_id, num_envs, options)
        elif autoreset is not None:
            raise ValueError("autoreset applies to envs built from an id; a vector env has its own")
        self.envs = vector_env
        spec = getattr(vector_env, "spec", None)
        self.name = f"gymnasium:{env_id or (spec.id if spec else type(vector_env).__name__)}"
        self.num_envs = int(vector_env.num_envs)
        self.device = torch.device(device)
        try:
            self._adopt_spaces(vector_env, actions)
            limit = max_episode_steps or (spec.max_episode_steps if spec is not None else None)
            if limit is None:
                raise GymnasiumBridgeError(
                    f"{self.name} has no time limit: pass max_episode_steps (params.yaml: "
                    f"env.options.max_episode_steps); evaluation needs one"
                )
            self.max_episode_steps = int(limit)
            self._adopt_autoreset_mode(vector_env)
        except GymnasiumBridgeError:
            vector_env.close()
            raise
        self._frames = Frames(vector_env, self.name, render_failures)
        self._rng = np.random.default_rng()
        self._allocate_host_memory()

    def _adopt_spaces(self, vector_env: VectorEnv, actions: str) -> None:
        """The contract's spaces, and how observations and actions are converted."""
        self._layout = observation_layout(vector_env.single_observation_space, self.name)
        self._actions = HostActions(
            vector_env.single_action_space, self.num_envs, actions, self.name
        )
        self.action_space = self._actions.space
        self.observation_space = self._layout.space
        # A Box that is no image is one flat vector (the fast path); else named entries.
        self._flat = self._layout.flat
        self._plain_rows = self._layout.plain_rows

    def _adopt_autoreset_mode(self, vector_env: VectorEnv) -> None:
        """How done instances are reset, per the vector env's auto-reset mode."""
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

    def _allocate_host_memory(self) -> None:
        """`final_obs`, and the host memory that steps write through: numpy views on CPU,
        staging buffers elsewhere."""
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
        # The latest observation per entry, on the host: `reset`'s, or the last step's
        # (numpy views of its slot or of staging).
        self._last_obs = self._layout.host_arrays(self.num_envs)

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

    def _entry_views(self, slot: StepSlot) -> dict[str, np.ndarray]:
        """numpy views of a CPU slot's observation entries, made once (as `host_views`)."""
        views = self._slot_views.get(id(slot))
        if views is None:
            views = {key: slot.next_obs[key].numpy() for key in self.obs_spec}
            self._slot_views[id(slot)] = views
            weakref.finalize(slot, self._slot_views.pop, id(slot), None)
        return views

    # --- the contract ----------------------------------------------------------------

    def _seeds(self, count: int) -> list[int]:
        return [int(s) for s in self._rng.integers(0, _SEED_BOUND, size=count)]

    def reset(
        self,
        seed: int | None = None,
        env_ids: torch.Tensor | None = None,
        group_size: int = 1,
    ) -> TensorDict:
        """Reset through the vector env with one drawn seed per instance (a group's
        instances share theirs; see the module docstring's *Seeding*)."""
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
        self._last_obs = self._layout.host_arrays(n)
        self._layout.write(obs, self._last_obs[FLAT_KEY] if self._flat else self._last_obs)
        return self._current_obs()

    def _current_obs(self) -> TensorDict:
        """A new observation TensorDict of the latest observations (copies, not shared)."""
        entries = {
            key: torch.from_numpy(np.array(value)).to(self.device)
            for key, value in self._last_obs.items()
        }
        return TensorDict(entries, batch_size=[self.num_envs], device=self.device)

    def step(self, action: torch.Tensor, slot: StepSlot) -> None:
        """Step the vector env and copy its results into `slot` once per field, handling
        its auto-reset mode as the module docstring describes."""
        host_action = self._actions.to_env(action, slot if self._staging is None else None)
        obs, reward, terminated, truncated, info = self.envs.step(host_action)
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
                self._layout.write_flat(obs, next_obs)
            self._last_obs[FLAT_KEY] = next_obs
        else:  # named entries, each through its numpy view
            next_obs = self._entry_views(slot) if self._staging is None else self._staged_entries
            self._layout.write_entries(obs, next_obs)
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
            self._write_final(self._layout.final_rows(finals, done), done)

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
        self._layout.write(obs, next_obs)

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
        """The Gymnasium envs' own frames (`rlcore.envs.gym_render`), on `self.device`."""
        return self._frames(env_ids, size).to(self.device)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The seed the episodes restart from on `load_state_dict` (see the module docstring)."""
        return {"seed": torch.tensor(int(self._rng.integers(0, _SEED_BOUND)))}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restart every episode from the saved seed (a resume here is not bit-exact)."""
        self.reset(seed=int(state["seed"]))

    def close(self) -> None:
        """Close the vector env (its worker processes, for `async`)."""
        self.envs.close()
