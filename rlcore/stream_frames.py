"""Frame stacks in the `StreamReplayBuffer`: each camera frame stored once, the k-frame stacks
of an env with `frame_stack` k > 1 (`rlcore.envs.frame_stack`) rebuilt at sample time.

A stacked image entry `[k * C, H, W]` is stored as its newest frame `[C, H, W]`: in the ring,
in the kept-apart finals and in the pending row. Beside each ring row r of env e, `age` (uint8)
counts the frames of the same episode in the rows just before it, up to k - 1. The stack of row
r is rows `r - min(d, age)` for d = k - 1 .. 0 (oldest first): the episode's earlier rows, and
where it began less than k - 1 rows back, its first frame repeated, exactly the padding
`FrameStack` showed the policy.

An episode begins at row r + 1 where transition r is done; for an env with invalid steps (a
next-step auto-reset) where transition r is invalid instead: that step reset the instance,
and the `done`'s next observation, the final one, belongs to the old episode. A rollout that
does not continue from the pending row (the collector was reset, so its envs were) begins
episodes at its first row.

No stored transition loses its history: the ring holds k - 1 rows more than the transitions and
the pending row, so the rows the oldest transition's stack reads stay until it goes; a buffer
that holds no transition (new, or emptied by a rollout longer than the ring) writes the k - 1
older frames of the rollout's first stack into the rows before it. Every stored transition
can be drawn, and its stacks are the ones the policy saw.

A kept-apart final (the true final observation of a truncation at row r, or a pending one kept
apart) is the newest frame of the stack row r + 1 would have shown had the episode gone on:
its older frames are rows `r + 1 - min(d, min(age[r] + 1, k - 1))`, d = k - 1 .. 1.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from rlcore.observations import ObsEntry, ObsSpec, describe
from rlcore.replay import ring_slices
from rlcore.rollout import OBS

AGE = "age"


def stored_spec(spec: ObsSpec, frames: int) -> dict[str, ObsEntry]:
    """`spec` with each image entry as the one frame of `frames` that is stored."""
    stored = {}
    for key, entry in spec.items():
        if entry.is_image:
            if entry.shape[0] % frames:
                raise ValueError(
                    f"obs entry {key!r} ({entry.describe()}) is no stack of {frames} frames"
                )
            entry = replace(entry, shape=(entry.shape[0] // frames, *entry.shape[1:]))
        stored[key] = entry
    if stored == dict(spec):
        raise ValueError(f"{frames} stacked frames, but no image entry in {describe(spec)}")
    return stored


class FrameStacks:
    """The stacked entries of a `StreamReplayBuffer`'s ring and their ages (module docstring).

    Shape:
        storage[OBS]: entries [R, N, C, H, W] (the stored frames), among others
        storage[AGE]: [R, N] uint8
    """

    def __init__(self, spec: ObsSpec, frames: int, storage: dict[str, Any]) -> None:
        self.frames = frames
        self.channels = {key: e.shape[0] // frames for key, e in spec.items() if e.is_image}
        self.ring = {key: storage[OBS][key] for key in self.channels}
        self.age = age = storage[AGE]
        rows, n = age.shape
        self._flat = {key: column.flatten(0, 1) for key, column in self.ring.items()}
        self._age_flat = age.view(-1)
        dev = age.device
        # Rows back of each frame of a stack, oldest first (before an episode start clamps
        # them), and the constants `gather` computes with, as tensors: a Python number would
        # be wrapped in a new tensor on every call.
        self._back = torch.arange(frames - 1, -1, -1, device=dev)
        self._minus_row = torch.tensor(-n, device=dev)
        self._slots = torch.tensor(rows * n, device=dev)
        self._one = torch.tensor(1, dtype=torch.uint8, device=dev)
        self._oldest = torch.tensor(frames - 1, dtype=torch.uint8, device=dev)

    def newest(self, key: str, value: torch.Tensor) -> torch.Tensor:
        """The newest frame (last C channels) of a stacked entry's `value` [..., k * C, H, W];
        any other entry's `value` as it is."""
        channels = self.channels.get(key)
        if channels is None:
            return value
        return value.narrow(-3, value.shape[-3] - channels, channels)

    def add(
        self,
        start: int,
        starts: torch.Tensor,
        first: dict[str, torch.Tensor] | None,
        restarted: torch.Tensor | None,
    ) -> None:
        """Age rows `start .. start + T` (ring rows, mod R) of a rollout of T transitions.

        `starts` [T, N]: where transition t ends its episode (row t + 1 begins one). `first`:
        the first row's stacks (entries [N, k * C, H, W]) when the buffer holds no
        transition: their older frames go to the k - 1 rows before `start`. Else the first
        row continues the pending one's episode, except for the envs `restarted` ([N] bool).
        """
        k, rows = self.frames, self.age.shape[0]
        if first is not None:
            for key, column in self.ring.items():
                stack = first[key].unflatten(1, (k, -1))
                for j in range(k - 1):
                    column[(start - (k - 1) + j) % rows].copy_(stack[:, j])
            age = torch.full_like(self.age[start], k - 1, dtype=torch.int64)
        else:
            age = self.age[start].long()
            if restarted is not None:
                age.masked_fill_(restarted, 0)
        steps = torch.arange(len(starts) + 1, device=age.device)[:, None]
        # The latest episode start at or before each row (-k: none in the rollout).
        marks = torch.where(starts, steps[1:], -k)
        latest = torch.cat([-age[None], marks]).cummax(0).values
        ages = (steps - latest).clamp_(max=k - 1)
        for ring, source in ring_slices(start, len(ages), rows):
            self.age[ring].copy_(ages[source])

    def stacks(self, row: int) -> dict[str, torch.Tensor]:
        """The stacks of ring row `row`, every env (new tensors [N, k * C, H, W])."""
        n = self.age.shape[1]
        slot = torch.arange(n, device=self.age.device).add_(row * n)
        index = torch.empty(n, self.frames, dtype=torch.int64, device=slot.device)
        self._index(slot, self._age_flat[slot].long(), index)
        return {
            key: column[index.view(-1)].view(n, -1, *column.shape[2:])
            for key, column in self._flat.items()
        }

    def gather(
        self,
        slot: torch.Tensor,
        following: torch.Tensor,
        has_final: torch.Tensor | None,
        scratch: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        obs: dict[str, torch.Tensor],
        next_obs: dict[str, torch.Tensor],
    ) -> None:
        """Rebuild the stacks of flat slots `slot` into `obs`'s entries and those of the
        slots `following` them into `next_obs`'s (as a kept-apart final's where `has_final`:
        its newest frame is the caller's to write).

        Shape:
            slot, following: [B] int64
            has_final: [B] bool
            scratch: [B] uint8, [B] uint8, [B] int64, [B, k] int64 (overwritten)
            obs, next_obs: entries [B, k * C, H, W]
        """
        age, next_age, wide, index = scratch
        torch.index_select(self._age_flat, 0, slot, out=age)
        self._index(slot, wide.copy_(age), index)
        self._gather(index, obs)
        torch.index_select(self._age_flat, 0, following, out=next_age)
        if has_final is not None:
            torch.add(age, self._one, out=age).clamp_(max=self._oldest)
            torch.where(has_final, age, next_age, out=next_age)
        self._index(following, wide.copy_(next_age), index)
        self._gather(index, next_obs)

    def _index(self, slot: torch.Tensor, age: torch.Tensor, out: torch.Tensor) -> None:
        """The flat slots of each stack's frames, oldest first, into `out` [B, k] (`age`
        int64: an op of mixed dtypes would allocate a converted copy on the CPU)."""
        torch.minimum(age[:, None], self._back, out=out)
        out.mul_(self._minus_row).add_(slot[:, None]).remainder_(self._slots)

    def _gather(self, index: torch.Tensor, out: dict[str, torch.Tensor]) -> None:
        for key, column in self._flat.items():
            target = out[key]
            frames = target.view(-1, *column.shape[1:])  # [B * k, C, H, W]
            torch.index_select(column, 0, index.view(-1), out=frames)
