"""The sampling half of `rlcore.stream_replay.StreamReplayBuffer`: transitions drawn from its
ring, and read out whole, in the batch layout of `rlcore.replay` (split from it to keep each
module one job).

`sample` builds its indices with tensor ops: no host sync (but the redraws of invalid slots,
one host check per round) and no allocation after the first call of a batch size.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from tensordict import TensorDict

from rlcore.observations import ObsSpec, allocate
from rlcore.replay import NEXT_OBS, Key, SampledBuffer
from rlcore.rollout import ACTION, OBS, REWARD, SUCCESS, TERMINATED, TRUNCATED
from rlcore.stream_frames import FrameStacks


@dataclass(frozen=True)
class _Work:
    """Per batch size, the indices and scratch `sample` gathers through (allocated once)."""

    slot: torch.Tensor  # int64 [B]: flat slot (row x N + env) of each drawn transition
    fresh: torch.Tensor  # int64 [B]: redraws of invalid slots
    ok: torch.Tensor  # bool [B]: the slot holds a transition
    next: torch.Tensor  # int64 [B]: the same env's slot in the following row
    final: torch.Tensor  # int32 [B]: the kept-apart final's slot (-1: none)
    has_final: torch.Tensor  # bool [B]
    rows: torch.Tensor  # int64 [B, 1]: (CPU) the rows that have a final, resized in place
    final_at: torch.Tensor  # int32 [B]: (CPU) their finals' slots
    finals: TensorDict  # [B] observation entries gathered from `finals`
    stacks: tuple[torch.Tensor, ...]  # `FrameStacks.gather`'s scratch

    @staticmethod
    def new(batch_size: int, spec: ObsSpec, frames: int, device: torch.device) -> _Work:
        def flat(dtype: torch.dtype, *shape: int) -> torch.Tensor:
            return torch.empty(batch_size, *shape, dtype=dtype, device=device)

        int64, int32, bool_, uint8 = torch.int64, torch.int32, torch.bool, torch.uint8
        return _Work(
            flat(int64), flat(int64), flat(bool_), flat(int64), flat(int32), flat(bool_),
            flat(int64, 1), flat(int32), allocate(spec, (batch_size,), device),
            (flat(uint8), flat(uint8), flat(int64), flat(int64, frames)),
        )  # fmt: skip


class StreamSampling(SampledBuffer):
    """`sample`, `empty_batch` and `chunks` of a `StreamReplayBuffer`, over the attributes it
    sets."""

    num_envs: int
    num_rows: int
    row: int
    rows: int
    size: int
    spec: ObsSpec
    storage: TensorDict
    finals: TensorDict
    frames: FrameStacks | None
    _lock: threading.Lock
    _stored: ObsSpec
    _final_live: int
    _work: dict[int, _Work]
    _sampled: list[tuple[Key, torch.Tensor]]
    _following: list[tuple[Key, torch.Tensor]]
    _final_flat: torch.Tensor
    _valid_flat: torch.Tensor | None
    _no_final: torch.Tensor
    _copy_final_rows: bool
    _ring_slots: torch.Tensor
    _row_slots: torch.Tensor

    def _newest(self, key: str, value: torch.Tensor) -> torch.Tensor:
        """What is stored of entry `key`'s `value`: its newest frame, if stacked."""
        return value if self.frames is None else self.frames.newest(key, value)

    def sample(self, batch_size: int, out: TensorDict | None = None) -> TensorDict:
        """Draw `batch_size` transitions uniformly (with replacement) from the stored ones.

        Writes into `out` (batch shape [batch_size], the batch layout; a view into a larger
        batch works) if given, else into this buffer's reused batch of that size.
        """
        out = self._target(batch_size, out)
        work = self._work.get(batch_size)
        if work is None:
            work = self._work[batch_size] = self._new_work(batch_size)
        with self._lock:
            if self.size == 0:
                raise ValueError("cannot sample from an empty replay buffer")
            self._draw(work.slot)
            while self._valid_flat is not None:  # rejection: uniform over the valid slots
                torch.index_select(self._valid_flat, 0, work.slot, out=work.ok)
                if work.ok.all():
                    break
                self._draw(work.fresh)
                torch.where(work.ok, work.slot, work.fresh, out=work.slot)
            self._gather(work, out)
        return out

    def _new_work(self, batch_size: int) -> _Work:
        frames = 1 if self.frames is None else self.frames.frames
        return _Work.new(batch_size, self._stored, frames, self.device)

    def _draw(self, slot: torch.Tensor) -> None:
        """Uniform flat slots among the stored rows', from the oldest row's first slot."""
        oldest = (self.row - self.rows) % self.num_rows * self.num_envs
        span = self.rows * self.num_envs
        torch.randint(oldest, oldest + span, slot.shape, generator=self.generator, out=slot)
        slot.remainder_(self._ring_slots)

    def _gather(self, work: _Work, out: TensorDict) -> None:
        """Transitions at `work.slot` into `out`: row r, and row r + 1 or the kept-apart
        final as `next_obs`."""
        for key, column in self._sampled:
            torch.index_select(column, 0, work.slot, out=out.get(key))
        torch.add(work.slot, self._row_slots, out=work.next).remainder_(self._ring_slots)
        for key, column in self._following:
            torch.index_select(column, 0, work.next, out=out.get(key))
        if self._final_live:
            torch.index_select(self._final_flat, 0, work.slot, out=work.final)
            torch.gt(work.final, self._no_final, out=work.has_final)
        if self.frames is not None:
            has_final = work.has_final if self._final_live else None
            obs, next_obs = dict(out.get(OBS).items()), dict(out.get(NEXT_OBS).items())
            self.frames.gather(work.slot, work.next, has_final, work.stacks, obs, next_obs)
        if not self._final_live:
            return
        if self._copy_final_rows:  # the host knows the rows with a final: copy only those
            torch.nonzero(work.has_final, out=work.rows.resize_(0))  # storage kept
            rows, count = work.rows.view(-1), work.rows.shape[0]
            at = torch.index_select(work.final, 0, rows, out=work.final_at[:count])
            for key, finals in self.finals.items():
                kept = torch.index_select(finals, 0, at, out=work.finals[key][:count])
                self._newest(key, out.get((NEXT_OBS, key))).index_copy_(0, rows, kept)
            return
        work.final.clamp_(min=0)  # accelerators: no host sync, gather all and select
        for key, finals in self.finals.items():
            target, scratch = self._newest(key, out.get((NEXT_OBS, key))), work.finals[key]
            torch.index_select(finals, 0, work.final, out=scratch)
            kept = work.has_final.view(-1, *[1] * (scratch.dim() - 1))
            torch.where(kept, scratch, target, out=target)

    def empty_batch(self, batch_size: int) -> TensorDict:
        """An uninitialised batch of the batch layout (`rlcore.replay`)."""

        def like(key: str) -> torch.Tensor:
            column = self.storage[key]
            return torch.empty(
                batch_size, *column.shape[2:], dtype=column.dtype, device=self.device
            )

        fields = {
            OBS: allocate(self.spec, (batch_size,), self.device),
            ACTION: like(ACTION),
            REWARD: like(REWARD),
            NEXT_OBS: allocate(self.spec, (batch_size,), self.device),
            TERMINATED: like(TERMINATED),
            TRUNCATED: like(TRUNCATED),
        }
        if SUCCESS in self.storage:
            fields[SUCCESS] = like(SUCCESS)
        return TensorDict(fields, batch_size=[batch_size], device=self.device)

    def chunks(self, batch_size: int) -> Iterator[TensorDict]:
        """The stored transitions, oldest first, in new batches of up to `batch_size`, with
        `next_obs` materialised (what a dataset on disk holds)."""
        with self._lock:
            span = self.rows * self.num_envs
            slots = torch.arange(span, device=self.device)
            slots.add_((self.row - self.rows) % self.num_rows * self.num_envs)
            slots.remainder_(self.num_rows * self.num_envs)
            if self._valid_flat is not None:
                slots = slots[self._valid_flat[slots]]
        for part in slots.split(batch_size):
            work, out = self._new_work(len(part)), self.empty_batch(len(part))
            work.slot.copy_(part)
            with self._lock:
                self._gather(work, out)
            yield out
