"""How Gymnasium's spaces map onto the batched env contract's: observation entries and
actions (the rules are in `rlcore.envs.gym_bridge`'s module docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import gymnasium.spaces as spaces
import numpy as np

from rlcore.errors import ConfigError
from rlcore.observations import FLAT_KEY

IMAGE_KEY = "image"
"""The one entry of an env whose observation space is an image `Box` (uint8, rank 3)."""
ENTRY_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")
"""What a Dict key must be to name an observation entry (entries name dataset files)."""
_CHANNELS = (1, 3, 4)  # grey, RGB, RGBA: the last dimension of a channel-last image


class GymnasiumBridgeError(ConfigError):
    """The Gymnasium env cannot be presented as a batched env (message names env and space)."""


@dataclass(frozen=True)
class EntryLayout:
    """Where one observation entry comes from in a Gymnasium observation, and how it is
    stored (see the module docstring)."""

    name: str
    key: str | None  # its Dict key; None: the whole observation (a Box)
    space: spaces.Box  # as stored: a float32 vector, or a uint8 [C, H, W] image
    channel_last: bool  # an [H, W, C] image, transposed as it is written

    def stored(self, batch: Any) -> np.ndarray:
        """A batch of this entry's Gymnasium values as stored (a view where it can be).

        Shape:
            batch: [k, *Gymnasium shape]; return: [k, *space.shape]
        """
        batch = np.asarray(batch)
        if self.space.dtype != np.uint8:
            return batch.reshape(len(batch), -1)
        return batch.transpose(0, 3, 1, 2) if self.channel_last else batch


def _entry_layout(name: str, key: str | None, box: spaces.Box) -> EntryLayout:
    if box.dtype == np.uint8 and len(box.shape) == 3:
        last = box.shape[2] in _CHANNELS and box.shape[0] not in _CHANNELS
        order = (2, 0, 1) if last else (0, 1, 2)
        low, high = np.transpose(box.low, order), np.transpose(box.high, order)
        return EntryLayout(name, key, spaces.Box(low, high, dtype=np.uint8), last)
    low, high = (np.asarray(b, dtype=np.float32).reshape(-1) for b in (box.low, box.high))
    return EntryLayout(name, key, spaces.Box(low, high, dtype=np.float32), False)


def observation_layout(space: spaces.Space, env: str) -> list[EntryLayout]:
    """The named entries of observation space `space`, in order (see the module docstring)."""
    if isinstance(space, spaces.Box):
        is_image = space.dtype == np.uint8 and len(space.shape) == 3
        return [_entry_layout(IMAGE_KEY if is_image else FLAT_KEY, None, space)]
    if not isinstance(space, spaces.Dict):
        raise GymnasiumBridgeError(
            f"{env}: unsupported observation space {space}; supported: Box, or Dict of Box"
        )
    layout = []
    for key, sub in space.spaces.items():
        if not isinstance(sub, spaces.Box):
            raise GymnasiumBridgeError(
                f"{env}: observation space entry {key!r} is {sub}; only Box entries of a "
                f"Dict observation space are supported"
            )
        if not (isinstance(key, str) and ENTRY_NAME.fullmatch(key)):
            raise GymnasiumBridgeError(
                f"{env}: observation space entry {key!r} cannot name an entry; names are 1 to "
                f"64 of A-Z a-z 0-9 _ (they name files in datasets): rename the Dict key"
            )
        layout.append(_entry_layout(key, key, sub))
    return layout


def action_space_of(space: spaces.Space, env: str) -> spaces.Box | spaces.Discrete:
    if isinstance(space, spaces.Discrete):
        return spaces.Discrete(int(space.n))
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return spaces.Box(space.low, space.high, dtype=np.float32)
    raise GymnasiumBridgeError(
        f"{env}: unsupported action space {space}; supported: Discrete, or a 1-D Box"
    )
