"""Flipbook: a tiny camera env whose frames say which they are, for frame-stacking tests."""

import gymnasium.spaces as spaces
import numpy as np
import torch
from tensordict import TensorDict

from rlcore.envs.base import StepSlot
from rlcore.envs.torch_env import TorchEnv

EPISODE, STEP, START = 0, 1, 2  # the image's channels


class Flipbook(TorchEnv):
    """Each instance's `image` (uint8 [3, 2, 2]) holds its episode count (channel 0), the
    step within the episode (1) and a random number drawn at the episode's reset, shared by
    a group (2); `step` (float32 [1]) is the step again. An action above 0.8 terminates (a
    uniform random action: 1 step in 10), 6 steps truncate; the reward is the action."""

    observation_space = spaces.Dict(
        [
            ("image", spaces.Box(0, 255, (3, 2, 2), np.uint8)),
            ("step", spaces.Box(-np.inf, np.inf, (1,), np.float32)),
        ]
    )
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    max_episode_steps = 6

    def __init__(self, num_envs: int, device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, device)
        self._counts = torch.zeros(3, num_envs, dtype=torch.int64, device=self.device)
        self._fresh = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _advance(self, action: torch.Tensor, slot: StepSlot) -> None:
        self._counts[STEP] += 1
        slot.reward.copy_(action[:, 0])
        torch.gt(action[:, 0], 0.8, out=slot.terminated)

    def _reset_where(self, mask: torch.Tensor) -> None:
        torch.randint(0, 256, self._fresh.shape, generator=self.generator, out=self._fresh)
        self._counts[EPISODE] += mask
        self._counts[STEP].masked_fill_(mask, 0)
        torch.where(mask, self._fresh, self._counts[START], out=self._counts[START])

    def _reset_ids(self, env_ids: torch.Tensor, group_size: int) -> None:
        groups = env_ids.numel() // group_size
        fresh = torch.randint(0, 256, (groups,), generator=self.generator, device=self.device)
        self._counts[EPISODE, env_ids] += 1
        self._counts[STEP, env_ids] = 0
        self._counts[START, env_ids] = fresh.repeat_interleave(group_size)

    def _observe(self, out: TensorDict) -> None:  # type: ignore[override]
        image = self._counts.T.remainder(256).to(torch.uint8)  # [N, 3]
        out["image"].copy_(image[:, :, None, None].expand_as(out["image"]))
        out["step"].copy_(self._counts[STEP, :, None])

    def _physics_state(self) -> dict[str, torch.Tensor]:
        return {"counts": self._counts}


def frame_ids(image: torch.Tensor) -> list[list[tuple[int, int]]]:
    """(episode, step) of each frame of stacks `image` [N, k * 3, 2, 2], oldest first."""
    frames = image[:, :, 0, 0].view(image.shape[0], -1, 3)
    return [[(int(f[EPISODE]), int(f[STEP])) for f in stack] for stack in frames]
