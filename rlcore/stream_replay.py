"""StreamReplayBuffer: the online replay buffer, each observation of the env streams stored once
(`rlcore.replay.ReplayBuffer` stores `obs` and `next_obs`: twice the bytes of a camera frame).

`storage` has batch shape `[R, N]`, a time-major ring of R = ceil(capacity / N) + 1 rows of the
N envs (the capacity rounded up to whole rows, `self.capacity` = (R - 1) x N transitions, and
one row more for the pending observation):

| key           | shape              | dtype           | row r, env e                         |
|---------------|--------------------|-----------------|--------------------------------------|
| `obs`         | [R, N] entries     | per entry       | observation the action was taken from |
| `action`      | [R, N, A] / [R, N] | float32 / int64 | the action                           |
| `reward`      | [R, N]             | float32         | reward of the transition             |
| `terminated`, `truncated` (`success`) | [R, N] | bool | as the env wrote them              |
| `final_index` | [R, N]             | int32           | slot of its final in `finals`, or -1 |
| `valid`       | [R, N]             | bool            | envs with invalid steps: a transition |

The `next_obs` of transition (r, e) is the observation at row r + 1 (mod R), same env, except
for a transition truncated and not terminated, whose true final observation (the rollout's
`final_obs[:, t]`) is kept apart in `finals` (a ring of observations, batch shape `[F]`) at
`final_index`. A terminated transition never bootstraps, so row r + 1's observation (the next
episode's first) serves as its finite `next_obs`. `sample` hands out the explicit batch
layout of `rlcore.replay`, so learners do not know the difference.

After `add_rollout` the rollout's bootstrap observation `obs[:, T]` sits in the row after the
last one written: the pending observation of transitions not yet added. The next rollout,
which the collector continues from it, writes its `obs[:, 0]` there again. Where that differs
(the collector was reset in between), the pending observation is kept apart as the newest
transitions' final first. Only rows whose next row is written are transitions.

Envs with invalid steps (a next-step auto-reset: after a done at t, `obs[:, t + 1]` is the
true final observation and step t + 1 is no transition) need nothing kept apart; their
invalid slots are stored but never drawn: `sample` redraws them, one host check per round
(one or two rounds: invalid steps are as rare as episode ends).

`finals` starts with N x (ceil(R / max_episode_steps) + 1) slots, the most that time limits
can truncate among R rows, and grows (reallocated, live finals copied, logged) when a write
would overwrite a final that a stored transition still points to: envs may end episodes by
truncation for other reasons. Bytes per stored transition: the raw observation's, plus about
1 / max_episode_steps of it for the finals, plus the scalars.

Camera images stacked over k frames (an env's `frame_stack`) are stored as their newest frame,
and `sample` rebuilds the stacks from the rows before, never across an episode start
(`rlcore.stream_frames`: a uint8 `age` column, and k - 1 more rows of history in the ring).

On an accelerator `add_rollout` synchronises with the host for its truncation or valid flags
(to place the finals and count transitions) and once per observation entry (`torch.equal`:
does the rollout start from the pending observation?). `sample` builds its indices with
tensor ops: no host sync (but the redraws above) and no allocation after the first call of a
batch size. Thread safety as in `rlcore.replay`.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv
from rlcore.observations import ObsSpec, allocate, as_spec
from rlcore.replay import (
    NEXT_OBS,
    action_layout,
    leaves,
    ring_slices,
)
from rlcore.rollout import (
    ACTION,
    DONE,
    FINAL_OBS,
    MASK,
    OBS,
    REWARD,
    SUCCESS,
    TERMINATED,
    TRUNCATED,
    num_steps,
)
from rlcore.stream_frames import AGE, FrameStacks, stored_spec
from rlcore.stream_sampling import StreamSampling, _Work
from rlcore.stream_state import FINAL_INDEX, VALID, StreamCheckpoint

log = logging.getLogger(__name__)

_NONE = np.empty(0, dtype=np.int64)
_COPIED = (ACTION, REWARD, TERMINATED, TRUNCATED, SUCCESS, VALID)  # from the rollout, as given


class StreamReplayBuffer(StreamCheckpoint, StreamSampling):
    """Time-major ring of N env streams with kept-apart finals (module docstring)."""

    def __init__(
        self,
        capacity: int,
        obs_spec: ObsSpec | int,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device | str,
        generator: torch.Generator,
        *,
        num_envs: int,
        with_success: bool = False,
        with_valid: bool = False,
        max_episode_steps: int | None = None,
        frame_stack: int = 1,
    ) -> None:
        _check_positive_ints(capacity=capacity, num_envs=num_envs)
        super().__init__(device, generator)
        self.num_envs, self.with_valid, self.spec = num_envs, with_valid, as_spec(obs_spec)
        # Stacked frames: what is stored of each observation, and the rows kept before the
        # oldest transition's for its stack (`rlcore.stream_frames`).
        self._stored = self.spec if frame_stack == 1 else stored_spec(self.spec, frame_stack)
        self._history = frame_stack - 1
        self._max_rows = -(-capacity // num_envs)  # transition rows: one pending row more
        self.num_rows = rows = self._max_rows + 1 + self._history
        self.capacity = self._max_rows * num_envs
        fields = _ring_fields(
            self._stored, (rows, num_envs), action_shape, action_dtype, self.device,
            with_success=with_success, with_valid=with_valid, with_age=frame_stack > 1,
        )  # fmt: skip
        self.storage = TensorDict(fields, batch_size=[rows, num_envs], device=self.device)
        self.frames = FrameStacks(self.spec, frame_stack, fields) if frame_stack > 1 else None
        # The columns `add_rollout` writes: observations, and (column, rollout key) of the
        # transitions' fields.
        self._ring_obs, self._final_index = dict(fields[OBS].items()), fields[FINAL_INDEX]
        self._copied = [(c, MASK if k == VALID else k) for k, c in fields.items() if k in _COPIED]
        # [R * N] views: what `sample` gathers from row r, and from row r + 1 as `next_obs`
        # (stacked entries: `self.frames` rebuilds them).
        stacked = {(OBS, key) for key in self.frames.channels} if self.frames else set()
        flat = {key: c.flatten(0, 1) for key, c in leaves(self.storage) if key not in stacked}
        self._sampled = [(k, c) for k, c in flat.items() if k not in (FINAL_INDEX, VALID, AGE)]
        self._following = [((NEXT_OBS, k[1]), c) for k, c in flat.items() if isinstance(k, tuple)]
        self._final_flat, self._valid_flat = flat[FINAL_INDEX], flat.get(VALID)
        slots = 0 if with_valid else _final_slots(rows, num_envs, max_episode_steps)
        self.finals = allocate(self._stored, (slots,), self.device)
        self.row = 0  # ring row of the pending observation (the next rollout's first)
        self.rows = 0  # transition rows stored, the newest just before `row`
        self.size = 0  # transitions stored (the valid ones)
        self._final_head = 0  # the next slot of `finals` written
        self._final_live = 0  # finals a stored transition points to: the ones before the head
        self._row_finals = np.zeros(rows, dtype=np.int64)  # per ring row: its live finals
        self._row_valid = np.zeros(rows, dtype=np.int64)  # per ring row: its transitions
        self._work: dict[int, _Work] = {}
        # What `sample` compares and shifts indices by, as tensors: a Python number would be
        # wrapped in a new tensor on every call.
        self._no_final = torch.tensor(-1, dtype=torch.int32, device=self.device)
        # `sample` copies only the rows that have a kept-apart final where a host check is
        # free (CPU, where a masked select of all rows costs far more); elsewhere it selects
        # between both gathers on the device.
        self._copy_final_rows = self.device.type == "cpu"
        self._ring_slots, self._row_slots = torch.tensor([rows * num_envs, num_envs]).to(device)

    @staticmethod
    def for_env(env: BatchedEnv, capacity: int, generator: torch.Generator) -> StreamReplayBuffer:
        """A buffer shaped for `env`'s observations, actions, instances and time limit."""
        shape, dtype = action_layout(env)
        return StreamReplayBuffer(
            capacity, env.obs_spec, shape, dtype, env.device, generator,
            num_envs=env.num_envs, with_success=env.has_success,
            with_valid=env.has_invalid_steps, max_episode_steps=env.max_episode_steps,
            frame_stack=env.frame_stack,
        )  # fmt: skip

    def __len__(self) -> int:
        return self.size

    @property
    def nominal_bytes(self) -> int:
        """Bytes held by the ring and the kept-apart finals."""
        tensors = [c for _, c in leaves(self.storage) + leaves(self.finals)]
        return sum(c.numel() * c.element_size() for c in tensors)

    def add_rollout(self, rollout: TensorDict) -> None:
        """Append a filled rollout's N x T transitions as T rows; `obs[:, T]` goes pending.

        A rollout of more than R - 1 steps keeps its last R - 1.
        """
        n, horizon = rollout.batch_size[0], num_steps(rollout)
        if n != self.num_envs:
            raise ValueError(f"the rollout has {n} envs, the replay buffer {self.num_envs}")
        if (MASK in rollout) != self.with_valid:
            raise ValueError(
                f"the rollout {'has' if MASK in rollout else 'lacks'} `mask`; the replay buffer "
                f"was built for an env {'with' if self.with_valid else 'without'} invalid steps"
            )
        if not self.with_valid and FINAL_OBS not in rollout:
            raise ValueError("the rollout lacks `final_obs` (RolloutSpec with_final_obs=True)")
        keep = min(horizon, self._max_rows)
        first = horizon - keep

        def steps(value: torch.Tensor, extra: int = 0) -> torch.Tensor:
            """Time-major rows `first .. T - 1 + extra` of a rollout field (contiguous)."""
            return value.transpose(0, 1)[first : horizon + extra]

        entries = rollout[OBS].items()
        given = {key: value[:, first] for key, value in entries}  # stacked, if stacked
        obs = {key: steps(self._newest(key, value), 1) for key, value in entries}
        copied = [(column, steps(rollout[key])) for column, key in self._copied]
        if self.with_valid:
            flags = steps(rollout[MASK])
        else:
            flags = steps(rollout[TRUNCATED]) & ~steps(rollout[TERMINATED])
        flags = flags.cpu().numpy()  # the host sync: where finals go, how many transitions
        t, env = (_NONE, _NONE) if self.with_valid else flags.nonzero()
        with self._lock:
            start, rows = self.row, self.num_rows
            self._drop_oldest(self.rows + keep - self._max_rows if first == 0 else self.rows)
            restarted, broken = self._broken_streams(given) if self.rows else (None, _NONE)
            if self.frames is not None:  # before the pending row is overwritten
                starts = ~steps(rollout[MASK]) if self.with_valid else steps(rollout[DONE])
                self.frames.add(start, starts, None if self.rows else given, restarted)
            self._reserve_finals(len(broken) + len(env))
            if len(broken):  # before row `start` is overwritten
                where = self._index(broken)
                pending = {k: v[start][where] for k, v in self._ring_obs.items()}
                self._keep_apart(pending, np.full_like(broken, (start - 1) % rows), broken)
            for ring, source in ring_slices(start, keep + 1, rows):
                for key, value in obs.items():
                    self._ring_obs[key][ring].copy_(value[source])
            for ring, source in ring_slices(start, keep, rows):
                for column, value in copied:
                    column[ring].copy_(value[source])
                self._final_index[ring].fill_(-1)
            if len(env):
                at = self._index(t), self._index(env)
                finals = {k: steps(self._newest(k, v))[at] for k, v in rollout[FINAL_OBS].items()}
                self._keep_apart(finals, (start + t) % rows, env)
            counts = flags.sum(1) if self.with_valid else np.full(keep, n)
            self._row_valid[(start + np.arange(keep)) % rows] = counts
            self.row, self.rows = (start + keep) % rows, self.rows + keep
            self.size += int(counts.sum())

    def _index(self, host: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(host, dtype=torch.int64, device=self.device)

    def _drop_oldest(self, count: int) -> None:
        """Forget the `count` oldest transition rows (about to be overwritten)."""
        if count <= 0:
            return
        rows = (self.row - self.rows + np.arange(count)) % self.num_rows
        self._final_live -= int(self._row_finals[rows].sum())
        self.size -= int(self._row_valid[rows].sum())
        self._row_finals[rows] = self._row_valid[rows] = 0
        self.rows -= count

    def _broken_streams(
        self, first: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor | None, np.ndarray]:
        """The envs whose rollout does not start from the pending observation ([N] bool, or
        None where all do), and those of them whose newest transition needs it kept apart:
        it has no final of its own and bootstraps. `first`: the rollout's first observation."""
        pending = {key: value[self.row] for key, value in self._ring_obs.items()}
        if self.frames is not None:  # stacks compared whole: the newest frame may repeat
            pending |= self.frames.stacks(self.row)
        if all(torch.equal(pending[key], value) for key, value in first.items()):
            return None, _NONE
        differs = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        for key, value in first.items():
            differs |= (pending[key] != value).flatten(1).any(1)
        newest = self.storage[(self.row - 1) % self.num_rows]
        needs = differs & (newest[FINAL_INDEX] < 0) & ~newest[TERMINATED]
        if self.with_valid:
            needs &= newest[VALID]
        return differs, needs.nonzero().view(-1).cpu().numpy()

    def _reserve_finals(self, count: int) -> None:
        """Make room for `count` more finals, never overwriting a live one: grow if needed."""
        slots, live = self.finals.batch_size[0], self._final_live
        if live + count <= slots:
            return
        grown = max(2 * slots, live + count)
        finals = allocate(self._stored, (grown,), self.device)
        if slots:  # live finals to [0, live), oldest first; the ring's indices follow them
            oldest = (self._final_head - live) % slots
            order = (torch.arange(live, device=self.device) + oldest) % slots
            for key, value in self.finals.items():
                torch.index_select(value, 0, order, out=finals[key][:live])
            index = self.storage[FINAL_INDEX]
            torch.where(index >= 0, (index - oldest).remainder_(slots), index, out=index)
        log.info("replay buffer: room for kept-apart final observations grown to %d", grown)
        self.finals, self._final_head = finals, live

    def _keep_apart(
        self, values: dict[str, torch.Tensor], rows: np.ndarray, envs: np.ndarray
    ) -> None:
        """Store `values` ([k] observation entries) as the finals of transitions (rows, envs)."""
        slots = self.finals.batch_size[0]
        where = self._index((self._final_head + np.arange(len(envs))) % slots)
        for key, value in values.items():
            self.finals[key].index_copy_(0, where, value)
        self._final_index[self._index(rows), self._index(envs)] = where.int()
        np.add.at(self._row_finals, rows, 1)
        self._final_head = (self._final_head + len(envs)) % slots
        self._final_live += len(envs)


def _ring_fields(
    stored: ObsSpec,
    shape: tuple[int, int],
    action_shape: tuple[int, ...],
    action_dtype: torch.dtype,
    device: torch.device,
    *,
    with_success: bool,
    with_valid: bool,
    with_age: bool,
) -> dict[str, Any]:
    """The ring's columns, each [rows, num_envs, ...]: observations as stored, the
    transitions' fields, where each row's final observation went, and the optional ones."""

    def column(*feature: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(*shape, *feature, dtype=dtype, device=device)

    fields: dict[str, Any] = {
        OBS: allocate(stored, shape, device),
        ACTION: column(*action_shape, dtype=action_dtype),
        REWARD: column(),
        TERMINATED: column(dtype=torch.bool),
        TRUNCATED: column(dtype=torch.bool),
    }
    if with_success:
        fields[SUCCESS] = column(dtype=torch.bool)
    fields[FINAL_INDEX] = column(dtype=torch.int32).fill_(-1)
    if with_valid:
        fields[VALID] = column(dtype=torch.bool)
    if with_age:
        fields[AGE] = column(dtype=torch.uint8)
    return fields


def _final_slots(rows: int, num_envs: int, max_episode_steps: int | None) -> int:
    """Slots for kept-apart final observations: at most one episode end per env every
    `max_episode_steps` rows (every row without a limit), and one more per env."""
    return num_envs * (-(-rows // (max_episode_steps or rows)) + 1)


def _check_positive_ints(**values: Any) -> None:
    """Refuse a size that is not a positive int, by name."""
    for name, value in values.items():
        if type(value) is not int or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
