"""How Gymnasium's spaces map onto the batched env contract's, for the Gymnasium bridge
(`rlcore.envs.gym_bridge`): observation entries, and actions.

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

An env built from an id whose observation space is discrete (`Discrete`, `MultiDiscrete`,
`MultiBinary`, or a `Tuple` of those and Boxes: FrozenLake, Taxi, Blackjack) is built with
Gymnasium's `FlattenObservation` around each instance (`needs_flattening`): one `state`
vector, one-hot per discrete part, as `gymnasium.spaces.flatten` writes it.

Anything else (`Text`, `Graph`, a Dict entry that is not a Box, `MultiDiscrete` actions, a
Box action with more than one dimension) fails at construction with an error naming the env
and the space.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium.spaces as spaces
import numpy as np
import torch

from rlcore.envs.base import StepSlot
from rlcore.errors import ConfigError
from rlcore.observations import FLAT_KEY

IMAGE_KEY = "image"
"""The one entry of an env whose observation space is an image `Box` (uint8, rank 3)."""
ENTRY_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")
"""What a Dict key must be to name an observation entry (entries name dataset files)."""
ACTION_MODES = ("clip", "rescale")
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


def _entries(space: spaces.Space, env: str) -> tuple[EntryLayout, ...]:
    if isinstance(space, spaces.Box):
        is_image = space.dtype == np.uint8 and len(space.shape) == 3
        return (_entry_layout(IMAGE_KEY if is_image else FLAT_KEY, None, space),)
    if not isinstance(space, spaces.Dict):
        raise GymnasiumBridgeError(
            f"{env}: unsupported observation space {space}; supported: Box, Dict of Box, and "
            f"from an env id, discrete spaces and Tuples of them (flattened)"
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
    return tuple(layout)


@dataclass(frozen=True)
class ObservationLayout:
    """A Gymnasium observation space's named entries, in order, and how batches of its
    observations are written into host arrays as stored (see the module docstring)."""

    entries: tuple[EntryLayout, ...]
    flat: bool  # one `state` entry, a Box that is no image: the fast path
    plain_rows: bool  # ... a Box of vectors: [N, obs_dim] rows, copied without a reshape

    @property
    def space(self) -> spaces.Box | spaces.Dict:
        """The observation space as stored."""
        if self.flat:
            return self.entries[0].space
        return spaces.Dict([(e.name, e.space) for e in self.entries])

    def host_arrays(self, num_envs: int) -> dict[str, np.ndarray]:
        """Zeroed host arrays [N, ...] for every entry, as stored."""
        return {e.name: np.zeros((num_envs, *e.space.shape), e.space.dtype) for e in self.entries}

    def write_flat(self, obs: Any, out: np.ndarray) -> None:
        """Write a flat env's batch of observations into `out` ([N, obs_dim] float32)."""
        out[...] = obs if self.plain_rows else np.reshape(obs, out.shape)

    def write_entries(self, obs: Any, out: Mapping[str, np.ndarray]) -> None:
        """Write a batch of observations into host arrays [N, ...] per entry, as stored."""
        for entry in self.entries:
            value = obs if entry.key is None else obs[entry.key]
            np.copyto(out[entry.name], entry.stored(value), casting="unsafe")

    def write(self, obs: Any, out: np.ndarray | Mapping[str, np.ndarray]) -> None:
        """Write a batch of observations into the flat rows or the per-entry arrays `out`."""
        if isinstance(out, np.ndarray):
            self.write_flat(obs, out)
        else:
            self.write_entries(obs, out)

    def final_rows(self, finals: Any, done: np.ndarray) -> dict[str, np.ndarray]:
        """The done instances' final observations per entry, as stored, from a same-step
        env's `info["final_obs"]` (an object array of observations, or for Dict spaces a
        dict of per-key arrays).

        Shape:
            done: [N] bool; return: [done count, ...] per entry
        """
        rows = np.flatnonzero(done)

        def batch(key: str | None) -> Any:
            if key is None:
                return np.stack([finals[i] for i in rows])
            if isinstance(finals, Mapping):
                return np.asarray(finals[key])[rows]
            return np.stack([finals[i][key] for i in rows])

        return {entry.name: entry.stored(batch(entry.key)) for entry in self.entries}


_FLATTENED = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def needs_flattening(space: spaces.Space) -> bool:
    """Whether observation space `space` is one the bridge takes only flattened (see the
    module docstring): discrete, or a Tuple of discrete spaces and Boxes."""
    if isinstance(space, _FLATTENED):
        return True
    if isinstance(space, spaces.Tuple):
        return all(isinstance(part, (*_FLATTENED, spaces.Box)) for part in space.spaces)
    return False


def observation_layout(space: spaces.Space, env: str) -> ObservationLayout:
    """The named entries of observation space `space` (see the module docstring)."""
    entries = _entries(space, env)
    first = entries[0]
    flat = first.key is None and first.name == FLAT_KEY
    return ObservationLayout(entries, flat, flat and len(space.shape or ()) == 1)


def action_space_of(space: spaces.Space, env: str) -> spaces.Box | spaces.Discrete:
    """The contract's action space for Gymnasium's `space` (see the module docstring)."""
    if isinstance(space, spaces.Discrete):
        return spaces.Discrete(int(space.n))
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return spaces.Box(space.low, space.high, dtype=np.float32)
    raise GymnasiumBridgeError(
        f"{env}: unsupported action space {space}; supported: Discrete, or a 1-D Box"
    )


def check_action_mode(mode: str) -> None:
    """`mode` must be one of `ACTION_MODES` (what Box actions in [-1, 1] mean)."""
    if mode not in ACTION_MODES:
        raise ValueError(f"actions must be one of {ACTION_MODES}, got {mode!r}")


class HostActions:
    """The policy's actions as the Gymnasium env's, in numpy: indices offset by the space's
    `start`, Box actions clipped or rescaled (`mode`) into a new array; the caller's tensor
    is never modified."""

    def __init__(self, space: spaces.Space, num_envs: int, mode: str, env: str) -> None:
        check_action_mode(mode)
        self.space = action_space_of(space, env)
        self._env = env
        self._offset = int(getattr(space, "start", 0))
        self._discrete = isinstance(self.space, spaces.Discrete)
        self._rescale = mode == "rescale" and not self._discrete
        self._num_envs = num_envs
        self._shape = (num_envs,) if self._discrete else (num_envs, *self.space.shape)
        self._dtype = torch.int64 if self._discrete else torch.float32
        self._host_dtype = np.dtype(np.int64 if self._discrete else np.float32)
        if not self._discrete:
            self._low, self._high = self.space.low, self.space.high
            self._half_range = 0.5 * (self._high - self._low)
            self._middle = self._low + self._half_range

    def to_env(self, action: torch.Tensor, slot: StepSlot | None) -> np.ndarray:
        """The env's actions for `action`; `slot`: a CPU slot, whose action column `action`
        may be (then read through its numpy view)."""
        if slot is not None and action is slot.action:
            # The collector's rollout column on CPU, read through its numpy view with no
            # call into torch (one costs a numpy env's step microseconds in caches).
            host = slot.host_action
            if host.dtype is not self._host_dtype or host.shape != self._shape:
                host = self._checked(action)
        else:
            host = self._checked(action)
        if self._discrete:
            return host + self._offset if self._offset else host
        if self._rescale:
            return np.clip(host, -1.0, 1.0) * self._half_range + self._middle
        clipped = np.maximum(host, self._low)
        return np.minimum(clipped, self._high, out=clipped)

    def _checked(self, action: torch.Tensor) -> np.ndarray:
        if action.shape != self._shape:
            if not (self._discrete and action.shape == (self._num_envs, 1)):
                raise GymnasiumBridgeError(
                    f"{self._env}: actions must have shape {list(self._shape)} for "
                    f"{self.space}, got {list(action.shape)}"
                )
            action = action.reshape(self._num_envs)
        if action.dtype != self._dtype or not action.is_cpu:
            action = action.to("cpu", self._dtype)
        return action.numpy()
