"""Observations as named entries, each with its own shape and dtype.

An env's observation is a TensorDict of entries (`state` float32 `[D]`, `image` uint8
`[C, H, W]`, `privileged` float32 `[P]`, ...) with the env batch as its batch shape. An env
with a flat `Box` observation space has one entry, `state` (`FLAT_KEY`); an env with a `Dict`
space has one entry per key, in the space's order. Images are channel-first uint8 wherever
they are stored (rollout, replay buffer, datasets, checkpoints); networks turn them into
floats (`rlcore.encoders`).

`ObsSpec` maps entry names to `ObsEntry`s; `obs_spec(space)` reads one off a space and
`allocate` makes storage for it. Everything that stores observations is shaped by a spec,
so a new kind of entry needs no change outside the network that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import gymnasium.spaces as spaces
import numpy as np
import torch
from tensordict import TensorDict

FLAT_KEY = "state"
"""The one entry of an env whose observation space is a flat `Box`."""


@dataclass(frozen=True)
class ObsEntry:
    """Shape (per instance) and dtype of one named observation entry."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    # Simulator state a deployed robot would not have: critics may read it, actors do not
    # unless told to (`PolicyConfig.actor_obs`). Not part of what storage must match.
    privileged: bool = field(default=False, compare=False)

    @property
    def is_image(self) -> bool:
        """A camera frame: uint8 `[C, H, W]`."""
        return self.dtype == torch.uint8 and len(self.shape) == 3

    @property
    def is_vector(self) -> bool:
        """A float feature vector `[D]` (normalised and fed to an MLP as it is)."""
        return self.dtype.is_floating_point and len(self.shape) == 1

    @property
    def nbytes(self) -> int:
        """Bytes of one instance's entry."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def describe(self) -> str:
        """`uint8 [3, 64, 64]`: the form error messages name entries in."""
        text = f"{str(self.dtype).removeprefix('torch.')} {list(self.shape)}"
        return f"{text} (privileged)" if self.privileged else text


ObsSpec = Mapping[str, ObsEntry]

_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8}


def _entry(key: str, box: spaces.Box) -> ObsEntry:
    """uint8 stays uint8; every other numeric dtype is stored as float32."""
    dtype = _TORCH_DTYPES.get(np.dtype(box.dtype), torch.float32)
    return ObsEntry(tuple(int(n) for n in box.shape), dtype)


def obs_spec(space: spaces.Space) -> dict[str, ObsEntry]:
    """The entries of an observation space: a 1-D float `Box` is the single `FLAT_KEY`
    entry; a `Dict` of `Box`es has one entry per key, in the space's order."""
    if isinstance(space, spaces.Box):
        return {FLAT_KEY: _entry(FLAT_KEY, space)}
    if isinstance(space, spaces.Dict):
        spec = {}
        for key, sub in space.spaces.items():
            if not isinstance(sub, spaces.Box):
                raise ValueError(f"observation entry {key!r} is {sub}; entries must be Boxes")
            spec[key] = _entry(key, sub)
        return spec
    raise ValueError(f"unsupported observation space {space}: need a Box or a Dict of Boxes")


def as_spec(spec: ObsSpec | int) -> dict[str, ObsEntry]:
    """A spec, or a flat env's observation width as its one-entry spec."""
    if isinstance(spec, int):
        return {FLAT_KEY: ObsEntry((spec,), torch.float32)}
    return dict(spec)


def with_privileged(spec: ObsSpec, privileged: tuple[str, ...]) -> dict[str, ObsEntry]:
    """`spec` with the entries named in `privileged` marked so."""
    unknown = [key for key in privileged if key not in spec]
    if unknown:
        raise ValueError(f"privileged entries {unknown} are not in {describe(spec)}")
    return {key: replace(e, privileged=key in privileged) for key, e in spec.items()}


def is_flat(spec: ObsSpec) -> bool:
    """The spec of a flat `Box` env: its only entry is a float vector named `FLAT_KEY`."""
    return list(spec) == [FLAT_KEY] and spec[FLAT_KEY].is_vector


def flat_dim(spec: ObsSpec) -> int:
    """Width of a flat env's observation vector."""
    if not is_flat(spec):
        raise ValueError(f"not a flat observation: {describe(spec)}")
    return spec[FLAT_KEY].shape[0]


def describe(spec: ObsSpec) -> str:
    """`image uint8 [3, 64, 64], state float32 [4]`: for messages."""
    return ", ".join(f"{key} {entry.describe()}" for key, entry in spec.items())


def allocate(
    spec: ObsSpec,
    batch: tuple[int, ...],
    device: torch.device | str,
    time_major: bool = False,
) -> TensorDict:
    """Zeroed storage for observations of batch shape `batch` (`[N]`, `[N, T + 1]`, ...).

    With `time_major` (a batch of `[N, T + 1]`), each entry is allocated `[T + 1, N, ...]`
    and exposed transposed, so a time step's slice `[:, t]` is contiguous.
    """
    entries = {}
    for key, entry in spec.items():
        if time_major:
            n, t1 = batch
            tensor = torch.zeros(t1, n, *entry.shape, dtype=entry.dtype, device=device)
            entries[key] = tensor.transpose(0, 1)
        else:
            entries[key] = torch.zeros(*batch, *entry.shape, dtype=entry.dtype, device=device)
    return TensorDict(entries, batch_size=list(batch), device=device)


def as_observation(value: torch.Tensor | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A flat tensor (an older checkpoint's, a library user's) as a one-entry observation."""
    if isinstance(value, torch.Tensor):
        return {FLAT_KEY: value}
    return dict(value.items())
