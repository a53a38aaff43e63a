"""PushCube seen through a camera: a top-down RGB image, the pusher's own state, and the
simulator's state for a critic.

The task, physics, rewards and resets are `PushCube`'s; only the observation differs:

| entry        | shape          | dtype   | what                                          |
|--------------|----------------|---------|-----------------------------------------------|
| `image`      | [3, S, S]      | uint8   | top-down view (`TopDownView`), S = image_size |
| `proprio`    | [4]            | float32 | pusher position and velocity                  |
| `privileged` | [12]           | float32 | PushCube's state observation (privileged)     |

Where the cube and the goal are is in the image only: an actor reads `image` and `proprio`
(by default: `privileged` is marked privileged), a critic may read everything.
"""

from __future__ import annotations

import gymnasium.spaces as spaces
import numpy as np
import torch
from tensordict import TensorDict

from rlcore.envs.push_cube import PushCube
from rlcore.envs.push_cube_view import TopDownView

IMAGE, PROPRIO, PRIVILEGED = "image", "proprio", "privileged"


class PushCubePixels(PushCube):
    """`PushCube` observed as `image`, `proprio` and `privileged` entries (module docstring)."""

    privileged_obs = (PRIVILEGED,)

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        control: str = "velocity",
        image_size: int = 48,
    ) -> None:
        if not 8 <= image_size <= 256:
            raise ValueError(f"image_size must be within [8, 256] pixels, got {image_size}")
        unbounded = {"low": -np.inf, "high": np.inf, "dtype": np.float32}
        self.observation_space = spaces.Dict(
            {
                IMAGE: spaces.Box(0, 255, (3, image_size, image_size), np.uint8),
                PROPRIO: spaces.Box(shape=(4,), **unbounded),
                PRIVILEGED: spaces.Box(shape=(12,), **unbounded),
            }
        )
        self._view = TopDownView(num_envs, image_size, device)
        super().__init__(num_envs, device, control)

    def _observe(self, out: TensorDict) -> None:  # type: ignore[override]
        super()._observe(out[PRIVILEGED])
        out[PROPRIO].copy_(self._state[0:4].T)
        self._view.draw(self._state, out[IMAGE])

    def _observe_ids(self, env_ids: torch.Tensor, out: TensorDict) -> None:  # type: ignore[override]
        super()._observe_ids(env_ids, out[PRIVILEGED])
        columns = self._state.index_select(1, env_ids)
        out[PROPRIO].index_copy_(0, env_ids, columns[0:4].T.contiguous())
        image = out[IMAGE]
        drawn = torch.empty(len(env_ids), *image.shape[1:], dtype=image.dtype, device=self.device)
        self._view.draw_ids(columns, drawn)
        image.index_copy_(0, env_ids, drawn)
