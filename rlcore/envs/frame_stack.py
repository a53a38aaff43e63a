"""FrameStack: an env whose camera images show their last k frames, so one observation shows
motion (Mnih et al. 2015 stack 4 Atari frames; DrQ-v2 stacks 3).

Every uint8 image entry `[C, H, W]` of the wrapped env becomes `[k * C, H, W]`: its last k
frames on the channels, oldest first, the newest in the last C channels. Vector entries pass
through unchanged. The semantics are SB3's `VecFrameStack` and Gymnasium's
`FrameStackObservation` padded with the first frame:

- after a reset (all instances or `env_ids`, group resets included), an instance's stack is
  its first frame k times;
- each step shifts the new frame in;
- an instance whose episode ended this step starts its new episode's stack from the new
  episode's first frame alone: no frame of the previous episode leaks into it. Its
  `final_obs` row is the stack the ended episode would have shown next: its k - 1 last
  frames and the true final frame;
- an env with invalid steps (a Gymnasium next-step auto-reset) shows the final frame shifted
  in at the `done`, as its `next_obs` is the final observation, and restarts the stack at the
  following (invalid) step, where the new episode's first frame arrives.

Per image entry the wrapper keeps the stacks in one `[N, k, C, H, W]` uint8 tensor, and
writes each step's stacks straight into the caller's slot with tensor ops over all instances
(a masked select where episodes ended: no host sync on accelerators). Its state is the inner
env's and the stacks, so a restored env continues bit-identically (the Gymnasium bridge
restarts episodes on load; its stacks are not exact either).

What stores the stacks: the PPO/GRPO rollout holds each observation as the env gives it, k
frames a row (one iteration's transient data); the off-policy `StreamReplayBuffer` stores the
newest frame alone and rebuilds the stacks at sample time (`rlcore.stream_frames`).
"""

from __future__ import annotations

import weakref
from typing import Any

import gymnasium.spaces as spaces
import numpy as np
import torch
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.errors import ConfigError
from rlcore.observations import allocate, describe

_INNER, _FRAMES, _RESTART = "env/", "frames/", "restart"


def stacked_space(space: spaces.Box, frames: int) -> spaces.Box:
    """An image Box `[C, H, W]` as `frames` of them on the channels: `[frames * C, H, W]`."""
    low, high = (np.concatenate([bound] * frames, axis=0) for bound in (space.low, space.high))
    return spaces.Box(low, high, dtype=space.dtype)


class FrameStack(BatchedEnv):
    """`env` with each uint8 image entry stacked over its last `frame_stack` frames (module
    docstring). `name` names the env in the refusal of an env without images.

    Everything else is `env`'s: spaces of the vector entries, action space, time limit,
    flags, rendering; attributes the contract does not name (`set_max_episode_steps`, a
    bridge's `name`) are read through from `env`.
    """

    def __init__(self, env: BatchedEnv, frame_stack: int, name: str | None = None) -> None:
        if type(frame_stack) is not int or frame_stack < 1:
            raise ValueError(f"frame_stack must be a positive integer, got {frame_stack!r}")
        spec = env.obs_spec
        images = [key for key, entry in spec.items() if entry.is_image]
        if not images:
            shown = name or type(env).__name__
            raise ConfigError(
                f"env.frame_stack: {frame_stack} stacks camera images, and env {shown!r} has "
                f"none (entries: {describe(spec)}): remove env.frame_stack or set it to 1"
            )
        self.env, self.frame_stack = env, frame_stack
        self.num_envs, self.device = env.num_envs, env.device
        self.action_space = env.action_space
        self.has_success, self.has_invalid_steps = env.has_success, env.has_invalid_steps
        self.bit_reproducible, self.privileged_obs = env.bit_reproducible, env.privileged_obs
        self.steps_on_host = env.steps_on_host
        inner = env.observation_space
        boxes = inner.spaces if isinstance(inner, spaces.Dict) else {key: inner for key in spec}
        stacked = {key: stacked_space(boxes[key], frame_stack) for key in images}
        # A Dict of the pairs keeps the inner order (a plain dict would be sorted).
        self.observation_space = spaces.Dict([(key, stacked.get(key, boxes[key])) for key in spec])
        n, dev = self.num_envs, self.device
        # Per image entry: the stacks [N, k, C, H, W], and the newest frames [N, C, H, W] the
        # inner env steps into.
        self._frames = {
            key: torch.zeros(n, frame_stack, *spec[key].shape, dtype=torch.uint8, device=dev)
            for key in images
        }
        self._newest = {key: frames[:, 0].clone() for key, frames in self._frames.items()}
        # Next-step auto-reset: the instances whose last step was a `done`; this step resets
        # them (whether or not the slot has `valid`, as in evaluation's).
        self._restart = torch.zeros(n, dtype=torch.bool, device=dev)
        self._inner_slots: dict[int, StepSlot] = {}
        self.final_obs = allocate(self.obs_spec, (n,), dev)
        # On CPU a host check is free: the final stacks are written only when an episode ends.
        self._host_check = dev.type == "cpu"

    @property
    def max_episode_steps(self) -> int:  # type: ignore[override]
        """The inner env's time limit (stacking changes no episode's length)."""
        return self.env.max_episode_steps

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet: never look it up in itself
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(
        self,
        seed: int | None = None,
        env_ids: torch.Tensor | None = None,
        group_size: int = 1,
    ) -> TensorDict:
        """Reset the inner env; each reset instance's stack repeats its first frame k times."""
        obs = self.env.reset(seed=seed, env_ids=env_ids, group_size=group_size)
        ids = None if env_ids is None else env_ids.to(self.device, torch.long)
        for key, frames in self._frames.items():
            first = obs[key].unsqueeze(1)  # [N, 1, C, H, W]: repeated over the k frames
            if ids is None:
                frames.copy_(first.expand_as(frames))
            else:
                frames[ids] = first[ids]
        if ids is None:
            self._restart.zero_()
        else:
            self._restart[ids] = False
        entries = {
            key: self._frames[key].flatten(1, 2).clone() if key in self._frames else value
            for key, value in obs.items()
        }
        return TensorDict(entries, batch_size=[self.num_envs], device=self.device)

    def step(self, action: torch.Tensor, slot: StepSlot) -> None:
        """Step the inner env into the newest frames, then shift them into each stack (a
        restarted instance's stack starts over from its first frame)."""
        inner = self._inner_slot(slot)
        self.env.step(action, inner)
        # A next-step env reset the instances done at the last step; others, those done now.
        restart = self._restart if self.has_invalid_steps else slot.done
        finals = self.env.final_obs  # read each step: an env may swap it for another
        write_finals = not self._host_check or bool(slot.done.any())
        shape = (self.num_envs, 1, 1, 1, 1)
        for key, frames in self._frames.items():
            new, k = inner.next_obs[key], self.frame_stack
            if write_finals:
                final = self.final_obs[key].unflatten(1, (k, -1))
                final[:, :-1].copy_(frames[:, 1:])
                final[:, -1].copy_(finals[key])
            out = slot.next_obs[key].unflatten(1, (k, -1))  # [N, k, C, H, W] view
            out[:, :-1].copy_(frames[:, 1:])
            out[:, -1].copy_(new)
            torch.where(restart.view(shape), new.unsqueeze(1), out, out=out)
            frames.copy_(out)
        if self.has_invalid_steps:
            self._restart.copy_(slot.done)
        if write_finals:
            for key, value in self.final_obs.items():
                if key not in self._frames:
                    value.copy_(finals[key])

    def _inner_slot(self, slot: StepSlot) -> StepSlot:
        """The slot the inner env steps into for `slot`: the same flags, rewards and vector
        entries (shared, not copied), the newest frames of the image entries; made once per
        slot (by `id`; an entry leaves with its slot, before the id can be reused)."""
        inner = self._inner_slots.get(id(slot))
        if inner is None:
            entries = {key: self._newest.get(key, value) for key, value in slot.next_obs.items()}
            inner = StepSlot(
                reward=slot.reward,
                terminated=slot.terminated,
                truncated=slot.truncated,
                done=slot.done,
                next_obs=TensorDict(entries, batch_size=[self.num_envs], device=self.device),
                success=slot.success,
                valid=slot.valid,
                action=slot.action,
            )
            self._inner_slots[id(slot)] = inner
            weakref.finalize(slot, self._inner_slots.pop, id(slot), None)
        return inner

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The inner env's state, the stacks and the pending restarts."""
        state = {_INNER + key: value for key, value in self.env.state_dict().items()}
        state |= {_FRAMES + key: frames.clone() for key, frames in self._frames.items()}
        state[_RESTART] = self._restart.clone()
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore the inner env, the stacks and the pending restarts from `state_dict`."""
        inner = {key.removeprefix(_INNER): v for key, v in state.items() if key.startswith(_INNER)}
        self.env.load_state_dict(inner)
        for key, frames in self._frames.items():
            frames.copy_(state[_FRAMES + key])
        self._restart.copy_(state[_RESTART])

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        """The inner env's frames: a video shows the scene, not the stack."""
        return self.env.render(env_ids, size)

    def close(self) -> None:
        """Close the inner env, which holds whatever lives outside torch."""
        self.env.close()
