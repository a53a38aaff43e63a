"""`TorchEnv`: the `rlcore.envs.base` contract for envs simulated with torch ops, the episode
clock, auto-reset, seeding and state owned here and the physics left to four hooks; and
`ColumnStateEnv`, a `TorchEnv` whose physics state is one tensor column per instance.
"""

from __future__ import annotations

import abc

import numpy as np
import torch
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv, StepSlot, check_group_size
from rlcore.observations import FLAT_KEY, allocate, is_flat


class TorchEnv(BatchedEnv):
    """A `BatchedEnv` simulated with torch ops on its own device.

    Subclasses implement the physics through four hooks; this class owns the episode clock,
    truncation, `done`, `final_obs`, auto-reset, seeding and state (de)serialisation.

    `_observe(out)` writes observations: `out` is the one entry's `[N, obs_dim]` tensor for a
    flat `Box` env (so a flat env never sees a TensorDict), or the TensorDict `[N]` of the
    entries for a `Dict` env.
    """

    def __init__(self, num_envs: int, device: torch.device | str = "cpu") -> None:
        if num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.elapsed_steps = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        self._elapsed_host = self.elapsed_steps.numpy() if self.device.type == "cpu" else None
        # 0-dim tensors: a Python scalar costs an extra wrapping per kernel on CPU.
        self._one_step = torch.tensor(1, dtype=torch.int32, device=self.device)
        self._time_limit = torch.tensor(
            self.max_episode_steps, dtype=torch.int32, device=self.device
        )
        self._flat = is_flat(self.obs_spec)
        self.final_obs = allocate(self.obs_spec, (num_envs,), self.device)
        self._final_target = self._observation_target(self.final_obs)
        self._all_ids = torch.arange(num_envs, device=self.device)

    # --- hooks a task implements -------------------------------------------------------

    @abc.abstractmethod
    def _advance(self, action: torch.Tensor, slot: StepSlot) -> None:
        """Advance the physics; write `reward`, `terminated` (and `success`) into the slot."""

    @abc.abstractmethod
    def _reset_where(self, mask: torch.Tensor) -> None:
        """Resample the state of instances where `mask` is true, branch-free (no host sync).

        Shape:
            mask: [N] bool
        """

    @abc.abstractmethod
    def _reset_ids(self, env_ids: torch.Tensor, group_size: int) -> None:
        """Resample instances `env_ids`; each block of `group_size` ids shares one state."""

    @abc.abstractmethod
    def _observe(self, out: torch.Tensor | TensorDict) -> None:
        """Write the current observation of every instance into `out` ([N, obs_dim] for a
        flat env, else the TensorDict [N] of the entries)."""

    @abc.abstractmethod
    def _physics_state(self) -> dict[str, torch.Tensor]:
        """Tensors (by reference) that make up the simulated state, for checkpointing."""

    # --- the contract ------------------------------------------------------------------

    def set_max_episode_steps(self, steps: int) -> None:
        """Change the time limit of this instance (evaluation horizons, tests)."""
        if steps <= 0:
            raise ValueError(f"max_episode_steps must be a positive integer, got {steps}")
        self.max_episode_steps = steps
        self._time_limit.fill_(steps)

    def reset(
        self,
        seed: int | None = None,
        env_ids: torch.Tensor | None = None,
        group_size: int = 1,
    ) -> TensorDict:
        """Reseed `generator` if `seed` is given, resample the chosen instances through
        `_reset_ids` and restart their clocks."""
        if seed is not None:
            self.generator.manual_seed(seed)
        ids = self._all_ids if env_ids is None else env_ids.to(self.device, torch.long)
        check_group_size(ids.numel(), group_size)
        self._reset_ids(ids, group_size)
        self.elapsed_steps[ids] = 0
        obs = allocate(self.obs_spec, (self.num_envs,), self.device)
        self._observe(self._observation_target(obs))
        return obs

    def _observation_target(self, obs: TensorDict) -> torch.Tensor | TensorDict:
        """What `_observe` writes into for observations `obs`: the flat entry, or all."""
        return obs[FLAT_KEY] if self._flat else obs

    def step(self, action: torch.Tensor, slot: StepSlot) -> None:
        """Advance the physics (`_advance`), then the clocks: truncation, `done`, the final
        observations and the auto-reset of the done instances."""
        self._advance(action, slot)
        if self.device.type == "cpu":
            # The clock in numpy, through views of the same memory: a numpy call costs less
            # than a torch call, above all right after a simulator's step has evicted the
            # caches (see `rlcore.envs.mujoco_batch`). A host-side index is free on CPU, and
            # touching only the finished instances is several times cheaper than sampling all
            # N and selecting.
            views = slot.host_views
            terminated, truncated, done = views.terminated, views.truncated, views.done
            elapsed = self._elapsed_host
            np.add(elapsed, 1, out=elapsed)
            np.greater_equal(elapsed, self.max_episode_steps, out=truncated)
            np.logical_or(terminated, truncated, out=done)
            if np.count_nonzero(done):  # the cheapest host check
                ids = torch.from_numpy(np.flatnonzero(done))
                elapsed[done] = 0
                self._observe_ids(ids, self._final_target)
                self._reset_ids(ids, 1)
        else:
            self.elapsed_steps.add_(self._one_step)
            torch.ge(self.elapsed_steps, self._time_limit, out=slot.truncated)
            torch.logical_or(slot.terminated, slot.truncated, out=slot.done)
            # No host sync on accelerators: observe and resample everything, select by mask.
            self.elapsed_steps.masked_fill_(slot.done, 0)
            self._observe(self._final_target)
            self._reset_where(slot.done)
        self._observe(self._observation_target(slot.next_obs))

    def _observe_ids(self, env_ids: torch.Tensor, out: torch.Tensor | TensorDict) -> None:
        """Write the current observation of instances `env_ids` into those rows of `out`
        (what `_observe` writes into)."""
        full = self._observation_target(allocate(self.obs_spec, (self.num_envs,), self.device))
        self._observe(full)
        out[env_ids] = full[env_ids]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Everything needed to continue bit-identically: physics, clocks, RNG."""
        state = {f"physics.{k}": v.clone() for k, v in self._physics_state().items()}
        state["elapsed_steps"] = self.elapsed_steps.clone()
        state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what `state_dict` returned (in place: buffers keep their identity)."""
        for key, tensor in self._physics_state().items():
            tensor.copy_(state[f"physics.{key}"])
        self.elapsed_steps.copy_(state["elapsed_steps"])
        self.generator.set_state(state["generator"])


class ColumnStateEnv(TorchEnv):
    """A `TorchEnv` whose whole simulated state is one `[state_dim, N]` tensor.

    Column-per-instance storage keeps each state variable contiguous, so the physics runs as
    few fused kernels over contiguous memory. Subclasses only say how to sample initial
    states; resets, group resets and checkpointing of the state are shared here.
    """

    state_dim: int

    def __init__(self, num_envs: int, device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, device)
        self._state = torch.zeros(self.state_dim, num_envs, device=self.device)
        self._fresh = torch.zeros(self.state_dim, num_envs, device=self.device)

    @abc.abstractmethod
    def _sample_initial(self, out: torch.Tensor) -> None:
        """Fill `out` ([state_dim, k]) with k independent initial states from `generator`."""

    def _reset_where(self, mask: torch.Tensor) -> None:
        self._sample_initial(self._fresh)
        torch.where(mask, self._fresh, self._state, out=self._state)

    def _reset_ids(self, env_ids: torch.Tensor, group_size: int) -> None:
        fresh = torch.empty(self.state_dim, env_ids.numel() // group_size, device=self.device)
        self._sample_initial(fresh)
        if group_size > 1:
            fresh = fresh.repeat_interleave(group_size, dim=1)
        self._state.index_copy_(1, env_ids, fresh)

    def _physics_state(self) -> dict[str, torch.Tensor]:
        return {"state": self._state}

    def graph_generators(self) -> tuple[torch.Generator, ...] | None:
        """On CUDA, a step is tensor work in place on buffers this env keeps (the state
        column, the clocks, `final_obs`): capturable, drawing from `generator` alone."""
        return (self.generator,) if self.device.type == "cuda" else None
