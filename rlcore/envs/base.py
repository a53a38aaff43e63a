"""The batched environment contract every rlcore environment implements.

A `BatchedEnv` holds `num_envs` (N) independent instances of one task on one torch device
(CPU or CUDA) and advances all of them with tensor operations: there is no Python loop over
instances. It writes its step results straight into storage it is handed (a `StepSlot` of
views into the shared rollout), so stepping allocates no result tensors in the steady state.

Keys an env writes for the transition at time index `t` (all on `env.device`):

| field        | shape         | dtype   | rollout index | meaning                         |
|--------------|---------------|---------|---------------|---------------------------------|
| `reward`     | `[N]`         | float32 | `t`           | reward of the transition        |
| `terminated` | `[N]`         | bool    | `t`           | the MDP reached a terminal state |
| `truncated`  | `[N]`         | bool    | `t`           | the time limit ended the episode |
| `done`       | `[N]`         | bool    | `t`           | `terminated | truncated`        |
| `success`    | `[N]`         | bool    | `t`           | only envs with `has_success`    |
| `next_obs`   | `[N]` TensorDict | its entries' | `t + 1`    | observation the policy sees next |

Observations are TensorDicts of named entries (`rlcore.observations`): `env.obs_spec` names
each entry's shape and dtype, read off `observation_space` (a flat `Box` is the one entry
`state` float32 `[obs_dim]`; a `Dict` of `Box`es one entry per key). Images are uint8
`[C, H, W]`. An env with `frame_stack` k > 1 (`rlcore.envs.frame_stack.FrameStack`) shows
each image entry as its last k frames on the channels, oldest first: `[k * C, H, W]`.

Auto-reset: an instance whose transition is `done` is reset inside the same `step()` call.
Its `next_obs` (rollout `obs[:, t + 1]`) is therefore the first observation of the *new*
episode, never the last observation of the old one. The true final observation of each
instance that is done (before its auto-reset) is in the matching row of `env.final_obs`
(a TensorDict `[N]` of the spec's entries); rows of instances that are not done hold stale
data. `step()` overwrites it, so a learner that bootstraps truncated transitions reads it
right after `step()`.

Invalid steps: an env that cannot reset an instance within the step that ends its episode
(a Gymnasium next-step vector env, through the bridge) sets `has_invalid_steps`. Its
`next_obs` at a `done` is then the final observation, the following step resets that
instance instead of acting on it, and `step()` writes `slot.valid` false for that step.
Learners keep such steps out of every loss and every statistic.

`terminated` and `truncated` may both be true (the time limit falls on a terminal step, as in
Gymnasium); `terminated` takes precedence: such a transition is never bootstrapped.

Seeding: `reset(seed=s)` makes all later behaviour a deterministic function of `s` and the
actions taken; randomness comes only from the env's own `torch.Generator` (`env.generator`),
whose state is part of `state_dict()`, so a restored env continues bit-identically.

Partial reset: `reset(env_ids=ids)` resets only those instances. Group reset:
`reset(group_size=G)` resets all instances so that each consecutive block of G instances
(`[0, G)`, `[G, 2G)`, ...) starts from one shared sampled initial state (GRPO compares
returns within such a group).

Actions: `[N, action_dim]` float32 for Box spaces (clipped to the bounds by the env) or `[N]`
int64 for Discrete spaces. The collector passes the rollout's own action column
(`slot.action`), which the env must not modify.
"""

from __future__ import annotations

import abc
import functools
from dataclasses import dataclass
from typing import NamedTuple

import gymnasium.spaces as spaces
import numpy as np
import torch
from tensordict import TensorDict

from rlcore.observations import (
    FLAT_KEY,
    ObsEntry,
    ObsSpec,
    allocate,
    flat_dim,
    obs_spec,
    with_privileged,
)


def check_group_size(num_reset: int, group_size: int) -> None:
    """A group reset needs whole groups: `group_size` must divide the number of reset envs."""
    if group_size <= 0 or num_reset % group_size != 0:
        raise ValueError(
            f"group_size must be a positive divisor of the number of reset envs "
            f"({num_reset}), got {group_size}"
        )


class HostViews(NamedTuple):
    """numpy views of one step's storage on the host, where a host-side env writes its step
    results without a copy: those of a CPU slot (`StepSlot.host_views`) or an env's own
    staging buffers (the Gymnasium bridge off the CPU). Each field but `next_obs` is the
    `StepSlot` field of the same name.

    `next_obs` is the flat observation's one entry (an empty array for named entries: those
    envs write `next_obs` themselves); `valid` is None where there is no `valid` storage.
    """

    next_obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    done: np.ndarray
    valid: np.ndarray | None = None


@dataclass(frozen=True)
class StepSlot:
    """Views into preallocated storage where `BatchedEnv.step` writes one transition."""

    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    done: torch.Tensor
    next_obs: TensorDict
    success: torch.Tensor | None = None
    # Only for envs with `has_invalid_steps`: false where the step was no real transition.
    valid: torch.Tensor | None = None
    # The rollout's action column at t, where the collector puts the policy's action before
    # stepping (None in standalone slots). A host-side env handed this very tensor as its
    # action reads it through `host_action`, without a call into torch.
    action: torch.Tensor | None = None

    @functools.cached_property
    def host_views(self) -> HostViews:
        """numpy views of a CPU slot, made once: host-side envs write through them."""
        flat = self.next_obs.get(FLAT_KEY, None)
        return HostViews(
            next_obs=np.empty(0, np.float32) if flat is None else flat.numpy(),
            reward=self.reward.numpy(),
            terminated=self.terminated.numpy(),
            truncated=self.truncated.numpy(),
            done=self.done.numpy(),
            valid=None if self.valid is None else self.valid.numpy(),
        )

    @functools.cached_property
    def host_action(self) -> np.ndarray:
        """numpy view of a CPU slot's `action` column, made once (see `action`)."""
        if self.action is None:
            raise ValueError("this slot has no action storage")
        return self.action.numpy()

    @staticmethod
    def allocate(
        num_envs: int, spec: ObsSpec, device: torch.device, with_success: bool
    ) -> StepSlot:
        """Allocate standalone storage (evaluation, tests); training writes into the rollout."""

        def flags() -> torch.Tensor:
            return torch.zeros(num_envs, dtype=torch.bool, device=device)

        return StepSlot(
            reward=torch.zeros(num_envs, device=device),
            terminated=flags(),
            truncated=flags(),
            done=flags(),
            next_obs=allocate(spec, (num_envs,), device),
            success=flags() if with_success else None,
        )


class BatchedEnv(abc.ABC):
    """N instances of one task on one device behind one contract (see module docstring).

    The builtin envs implement it with torch ops (`TorchEnv`); the Gymnasium bridge
    (`rlcore.envs.gym_bridge`) implements it over any Gymnasium vector env.
    """

    observation_space: spaces.Box | spaces.Dict
    action_space: spaces.Box | spaces.Discrete
    max_episode_steps: int
    has_success: bool = False
    # True when some steps are no transition (a Gymnasium next-step reset the bridge cannot
    # avoid): `step()` then writes `slot.valid`, and learners skip the invalid ones.
    has_invalid_steps: bool = False
    # The determinism the contract guarantees: True, the same seed, actions and state give
    # bit-identical trajectories; False (MuJoCo Warp on CUDA), they agree to float32
    # round-off at first, which contacts amplify over steps.
    bit_reproducible: bool = True
    # True where every step passes through host memory anyway (numpy simulators: the
    # Gymnasium bridge, mujoco.batch): reading a step's flags there costs no device sync,
    # so the collector keeps its host checks even on the sync-free (compiled) path.
    steps_on_host: bool = False
    # Frames each image entry stacks (module docstring): replay buffers store the newest
    # frame alone and rebuild the stack (`rlcore.stream_replay`).
    frame_stack: int = 1
    num_envs: int
    device: torch.device
    final_obs: TensorDict

    # Entries of a Dict observation that only a critic should read (simulator state).
    privileged_obs: tuple[str, ...] = ()

    @functools.cached_property
    def obs_spec(self) -> dict[str, ObsEntry]:
        """The observation's named entries (`rlcore.observations`)."""
        return with_privileged(obs_spec(self.observation_space), self.privileged_obs)

    @property
    def obs_dim(self) -> int:
        """Width of a flat env's observation vector (ValueError for structured ones)."""
        return flat_dim(self.obs_spec)

    @property
    def action_dim(self) -> int:
        """Width of one action: the Box dimension, or 1 for a Discrete choice."""
        if isinstance(self.action_space, spaces.Discrete):
            return 1
        return int(self.action_space.shape[0])

    @abc.abstractmethod
    def reset(
        self,
        seed: int | None = None,
        env_ids: torch.Tensor | None = None,
        group_size: int = 1,
    ) -> TensorDict:
        """Reset all (or `env_ids`) instances and return the current observation of all N.

        Shape:
            return: a new TensorDict [N] of the spec's entries
        """

    @abc.abstractmethod
    def step(self, action: torch.Tensor, slot: StepSlot) -> None:
        """Advance every instance by one step, writing the transition into `slot`."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, torch.Tensor]:
        """What a checkpoint needs to continue this env."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what `state_dict` returned."""

    def graph_generators(self) -> tuple[torch.Generator, ...] | None:
        """The generators `step` draws from, where `step` may be captured in a CUDA graph
        (`rlcore.collection_graph`); None where it may not (the default): steps that do host
        work, swap tensors or launch their own graphs (MuJoCo Warp)."""
        return None

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        """Draw RGB frames of the chosen instances (all by default).

        Shape:
            return: [len(env_ids), size, size, 3] uint8, on `self.device`
        """
        raise NotImplementedError(f"{type(self).__name__} does not render")

    def close(self) -> None:  # noqa: B027 (optional hook: most envs hold nothing)
        """Release what the env holds outside torch (processes, simulators); idempotent."""
