"""Replay buffers: transitions on the training device, sampled uniformly with the run's generator.

Every buffer hands out batches of one layout (what SAC and the `DataMixer` read):

| key          | shape            | dtype            | meaning                                  |
|--------------|------------------|------------------|------------------------------------------|
| `obs`        | [B] entries      | per entry        | observation the action was taken from    |
| `action`     | [B, A] or [B]    | float32 / int64  | the action, in the env's own space       |
| `reward`     | [B]              | float32          | reward of the transition                 |
| `next_obs`   | [B] entries      | per entry        | the observation the transition led to    |
| `terminated` | [B]              | bool             | the MDP ended: never bootstrap           |
| `truncated`  | [B]              | bool             | the time limit ended it (statistics)     |
| `success`    | [B]              | bool             | envs that report success (statistics)    |

`obs` and `next_obs` are nested TensorDicts of the env's named observation entries
(`rlcore.observations`), each with its own dtype (camera images stay uint8).

`next_obs` is the true successor, also where an episode ended by its time limit: the env's
final observation, never the first observation of the next episode that an auto-resetting
env shows at `t + 1`. A learner bootstraps from `next_obs` exactly when `terminated` is
false; a terminated transition's `next_obs` is finite but need not be the final observation
(the online buffer hands out the next episode's first there).

Two layouts store them:

- `rlcore.stream_replay.StreamReplayBuffer`, the online buffer: the env streams as the
  collector produced them, each observation stored once (a transition's `next_obs` is the
  following row's observation), only the true final observations of time-limit ends kept
  apart.
- `ReplayBuffer`: explicit transitions, `obs` and `next_obs` each stored (2x the frame
  bytes), for transitions that come without their stream: offline datasets
  (`rlcore.datasets`) and recordings.

Both allocate everything up front; `sample` gathers into a batch allocated on the first call
of each batch size and reused afterwards, so a returned batch is overwritten by the next
`sample` of that size.

Thread safety: adding, `sample`, `state_dict` and `load_state_dict` each hold the buffer's
lock while they touch its storage and counters, so a prefetching thread's `sample` sees every
transition either entirely before or entirely after a concurrent add: never a transition
whose fields come from different adds, and never a slot beyond the filled size. What is not
protected: the returned batch (a thread consumes it before its next `sample` of that size;
two threads sampling one size concurrently must pass their own `out`), and the generator
(shared with whoever else draws from it). On CUDA the lock orders the kernel launches, so
both threads must use the same stream.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import gymnasium.spaces as spaces
import torch
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv
from rlcore.observations import FLAT_KEY, ObsSpec, allocate, as_spec
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

NEXT_OBS = "next_obs"

Key = str | tuple[str, ...]


def column_name(key: Key) -> str:
    """A storage column's name in saved state: `obs/state`, `action`."""
    return key if isinstance(key, str) else "/".join(key)


def leaves(td: TensorDict) -> list[tuple[Key, torch.Tensor]]:
    """(key, tensor) of every stored tensor; observation entries are nested keys."""
    return list(td.items(include_nested=True, leaves_only=True))


def action_layout(env: BatchedEnv) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape and dtype of one of `env`'s actions: `()` int64 for a Discrete space."""
    if isinstance(env.action_space, spaces.Discrete):
        return (), torch.int64
    return (env.action_dim,), torch.float32


def ring_slices(start: int, count: int, size: int) -> list[tuple[slice, slice]]:
    """(ring rows, source rows) pairs for `count` rows written from row `start` of a ring of
    `size` rows: one slice, or two where the ring wraps."""
    first = min(count, size - start)
    pairs = [(slice(start, start + first), slice(0, first))]
    if first < count:
        pairs.append((slice(0, count - first), slice(first, count)))
    return pairs


# Saved buffers from before named observation entries.
_LEGACY_NAMES = {OBS: f"{OBS}/{FLAT_KEY}", NEXT_OBS: f"{NEXT_OBS}/{FLAT_KEY}"}


class TransitionSource(Protocol):
    """What learners, the `DataMixer` and `save_dataset` read from a buffer, whatever its
    layout: `len` (transitions stored), `sample` and `empty_batch` (the batch layout), and
    `chunks` (every stored transition oldest first, `next_obs` explicit; not one snapshot
    against concurrent adds)."""

    def __len__(self) -> int: ...

    def sample(self, batch_size: int, out: TensorDict | None = None) -> TensorDict:
        """Draw `batch_size` transitions uniformly, with replacement, into `out` if given
        (else into a batch the buffer reuses)."""
        ...

    def empty_batch(self, batch_size: int) -> TensorDict:
        """An uninitialised batch of the batch layout, for a caller that fills its rows."""
        ...

    def chunks(self, batch_size: int) -> Iterator[TensorDict]:
        """Every stored transition, oldest first, in new batches of up to `batch_size`."""
        ...


class SampledBuffer(abc.ABC):
    """The lock, generator and reused batches every buffer has."""

    def __init__(self, device: torch.device | str, generator: torch.Generator) -> None:
        self.device, self.generator = torch.device(device), generator
        self._lock = threading.Lock()
        self._batches: dict[int, TensorDict] = {}

    @abc.abstractmethod
    def empty_batch(self, batch_size: int) -> TensorDict:
        """An uninitialised batch of the batch layout (module docstring)."""

    def _target(self, batch_size: int, out: TensorDict | None) -> TensorDict:
        """`out` once checked, else this buffer's reused batch of `batch_size` rows."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        if out is not None and out.batch_size != torch.Size([batch_size]):
            # index_select would resize a wrong-sized `out`, silently detaching it.
            raise ValueError(f"out has batch size {list(out.batch_size)}, not [{batch_size}]")
        if out is None:
            out = self._batches.get(batch_size)
            if out is None:
                out = self._batches[batch_size] = self.empty_batch(batch_size)
        return out


class ReplayBuffer(SampledBuffer):
    """Circular store of explicit transitions: one TensorDict of batch shape `[capacity]`
    with the batch layout's keys (module docstring), `obs` and `next_obs` both stored.

    `add` and `add_rollout` write straight into the storage (at most two slices per key,
    where the cursor wraps; `add_rollout` of a rollout with `mask` is the exception, it
    gathers the valid rows). `generator` lives on the buffer's device.
    """

    def __init__(
        self,
        capacity: int,
        obs_spec: ObsSpec | int,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device | str,
        generator: torch.Generator,
        with_success: bool = False,
    ) -> None:
        if type(capacity) is not int or capacity <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        super().__init__(device, generator)
        self.capacity = capacity

        def column(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(capacity, *shape, dtype=dtype, device=self.device)

        fields = {
            OBS: allocate(as_spec(obs_spec), (capacity,), self.device),
            ACTION: column(*action_shape, dtype=action_dtype),
            REWARD: column(),
            NEXT_OBS: allocate(as_spec(obs_spec), (capacity,), self.device),
            TERMINATED: column(dtype=torch.bool),
            TRUNCATED: column(dtype=torch.bool),
        }
        if with_success:
            fields[SUCCESS] = column(dtype=torch.bool)
        self.storage = TensorDict(fields, batch_size=[capacity], device=self.device)
        self._columns = leaves(self.storage)
        self.cursor = 0  # where the next transition goes
        self.size = 0  # filled slots
        self._indices: dict[int, torch.Tensor] = {}

    @staticmethod
    def for_env(env: BatchedEnv, capacity: int, generator: torch.Generator) -> ReplayBuffer:
        """A buffer shaped for `env`'s observations and actions, on its device."""
        shape, dtype = action_layout(env)
        return ReplayBuffer(
            capacity, env.obs_spec, shape, dtype, env.device, generator, env.has_success
        )

    def __len__(self) -> int:
        return self.size

    @property
    def nominal_bytes(self) -> int:
        """Bytes held by the storage."""
        return sum(c.numel() * c.element_size() for _, c in self._columns)

    def _advance(self, count: int) -> None:
        self.cursor = (self.cursor + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def add(self, batch: TensorDict) -> None:
        """Append the transitions of `batch` (batch shape [B], the storage's keys).

        With B above the capacity only the last `capacity` ones are kept.
        """
        with self._lock:
            count = batch.batch_size[0]
            if count > self.capacity:
                batch, count = batch[count - self.capacity :], self.capacity
            for rows, source in ring_slices(self.cursor, count, self.capacity):
                for key, column in self._columns:
                    column[rows].copy_(batch[key][source])
            self._advance(count)

    def add_rollout(self, rollout: TensorDict) -> None:
        """Append the N x T transitions of a filled rollout, time step by time step.

        `next_obs` is `final_obs[:, t]` where the transition is done and `obs[:, t + 1]`
        elsewhere, written straight into the storage. A rollout with `mask` (an env with
        invalid steps) keeps only the valid transitions; that path allocates.
        """
        horizon = num_steps(rollout)

        def steps(value: torch.Tensor) -> torch.Tensor:
            """Time-major [T * N, ...] rows of a rollout field (contiguous in its layout)."""
            return value.transpose(0, 1)[:horizon].flatten(0, 1)

        done = steps(rollout[DONE])
        flat = {key: steps(rollout[key]) for key in (ACTION, REWARD, TERMINATED, TRUNCATED)}
        if SUCCESS in self.storage:
            flat[SUCCESS] = steps(rollout[SUCCESS])
        entries = [
            (key, steps(value), value.transpose(0, 1)[1:].flatten(0, 1), steps(final))
            for (key, value), final in zip(
                rollout[OBS].items(), rollout[FINAL_OBS].values(), strict=True
            )
        ]
        for key, obs, _, _ in entries:
            flat[(OBS, key)] = obs
        if MASK in rollout:
            valid = steps(rollout[MASK])
            flat = {key: value[valid] for key, value in flat.items()}
            done = done[valid]
            entries = [(k, o, f[valid], e[valid]) for k, o, f, e in entries]
        with self._lock:
            count = done.shape[0]
            if count > self.capacity:
                skip = count - self.capacity
                flat = {key: value[skip:] for key, value in flat.items()}
                done = done[skip:]
                entries = [(k, o, f[skip:], e[skip:]) for k, o, f, e in entries]
                count = self.capacity
            for rows, source in ring_slices(self.cursor, count, self.capacity):
                for key, value in flat.items():
                    self.storage[key][rows].copy_(value[source])
                for key, _, following, final in entries:
                    ended = done[source].view(-1, *[1] * (following.dim() - 1))
                    out = self.storage[NEXT_OBS, key][rows]
                    torch.where(ended, final[source], following[source], out=out)
            self._advance(count)

    def sample(self, batch_size: int, out: TensorDict | None = None) -> TensorDict:
        """Draw `batch_size` transitions uniformly (with replacement) from the filled slots.

        Writes into `out` (batch shape [batch_size], the batch layout; a view into a larger
        batch works, as its rows are contiguous) if given, else into this buffer's reused
        batch of that size.
        """
        out = self._target(batch_size, out)
        index = self._indices.get(batch_size)
        if index is None:
            index = torch.empty(batch_size, dtype=torch.int64, device=self.device)
            self._indices[batch_size] = index
        with self._lock:
            if self.size == 0:
                raise ValueError("cannot sample from an empty replay buffer")
            torch.randint(self.size, (batch_size,), generator=self.generator, out=index)
            for key, column in self._columns:
                torch.index_select(column, 0, index, out=out.get(key))
        return out

    def empty_batch(self, batch_size: int) -> TensorDict:
        """An uninitialised batch with the storage's keys, shapes and dtypes."""
        return self.storage.apply(
            lambda c: torch.empty(batch_size, *c.shape[1:], dtype=c.dtype, device=c.device),
            batch_size=[batch_size],
        )

    def chunks(self, batch_size: int) -> Iterator[TensorDict]:
        """The filled transitions, oldest first, as copies of up to `batch_size` rows."""
        start = self.cursor if self.size == self.capacity else 0
        order = torch.arange(start, start + self.size, device=self.device) % self.capacity
        for part in order.split(batch_size):
            with self._lock:
                rows = self.storage[part]
            yield rows

    def state_dict(self) -> dict[str, Any]:
        """The filled rows (on the CPU), cursor and size: exact resume of the buffer.

        The generator is not included: the run that owns it saves its state.
        """
        with self._lock:
            return {
                "capacity": self.capacity,
                "cursor": self.cursor,
                "size": self.size,
                "storage": {
                    column_name(k): v[: self.size].to("cpu", copy=True) for k, v in self._columns
                },
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, in place (the storage keeps its identity).

        Everything is checked before anything is written: a state that does not fit leaves
        the buffer as it was.
        """
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"replay state of capacity {state['capacity']} does not fit a buffer of "
                f"capacity {self.capacity}"
            )
        saved, size, cursor = state["storage"], int(state["size"]), int(state["cursor"])
        saved = {_LEGACY_NAMES.get(name, name): rows for name, rows in saved.items()}
        if not (0 <= size <= self.capacity and 0 <= cursor < self.capacity):
            raise ValueError(f"replay state's size {size} / cursor {cursor} out of range")
        check_saved(saved, {column_name(k): (size, c) for k, c in self._columns})
        with self._lock:
            for key, column in self._columns:
                column[:size].copy_(saved[column_name(key)])
            self.cursor, self.size = cursor, size


def check_saved(
    saved: dict[str, torch.Tensor], wanted: dict[str, tuple[int, torch.Tensor]]
) -> None:
    """Saved columns named as `wanted`'s, each `rows` rows of its column's row shape and dtype."""
    if set(saved) != set(wanted):
        raise ValueError(f"replay state holds {sorted(saved)}, the buffer {sorted(wanted)}")
    for name, (rows, column) in wanted.items():
        shape, value = (rows, *column.shape[1:]), saved[name]
        if value.shape != shape or value.dtype != column.dtype:
            raise ValueError(
                f"replay state's {name} is {value.dtype} {list(value.shape)}, the buffer "
                f"needs {column.dtype} {list(shape)}"
            )
