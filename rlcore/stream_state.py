"""The checkpoint half of `rlcore.stream_replay.StreamReplayBuffer`: its stored rows and live
finals saved and restored for exact resume (split from it to keep each module one job).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlcore.observations import ObsSpec, allocate
from rlcore.replay import Key, check_saved, column_name, leaves
from rlcore.rollout import FINAL_OBS
from rlcore.stream_frames import AGE

FINAL_INDEX = "final_index"
VALID = "valid"


class StreamCheckpoint:
    """`state_dict` / `load_state_dict` of a `StreamReplayBuffer`, over the attributes it sets."""

    capacity: int
    num_envs: int
    num_rows: int
    row: int
    rows: int
    size: int
    spec: ObsSpec
    storage: TensorDict
    finals: TensorDict
    device: torch.device
    with_valid: bool
    _lock: threading.Lock
    _stored: ObsSpec
    _history: int
    _max_rows: int
    _final_head: int
    _final_live: int
    _row_finals: np.ndarray
    _row_valid: np.ndarray

    def state_dict(self) -> dict[str, Any]:
        """The stored rows (oldest first, the pending one last) and the live finals (in the
        order they were kept, `final_index` renumbered), on the CPU: exact resume.

        The generator is not included: the run that owns it saves its state.
        """
        with self._lock:
            order = self._ring_order()
            slots, live = self.finals.batch_size[0], self._final_live
            oldest = (self._final_head - live) % slots if slots else 0
            kept = (torch.arange(live, device=self.device) + oldest) % max(slots, 1)
            storage = {}
            for key, column in leaves(self.storage):
                storage[column_name(key)] = column[self._saved_rows(key, order)].cpu()
            index = storage[FINAL_INDEX]
            storage[FINAL_INDEX] = torch.where(index >= 0, (index - oldest) % max(slots, 1), -1)
            for key, value in self.finals.items():
                storage[f"{FINAL_OBS}/{key}"] = value[kept].cpu()
            return {
                "capacity": self.capacity,
                "num_envs": self.num_envs,
                "row": self.row,
                "rows": self.rows,
                "final_slots": slots,
                "storage": storage,
            }

    def _ring_order(self) -> torch.Tensor:
        """Ring rows from the oldest transition's (the k - 1 before it with stacked frames:
        its history) to the pending one (none while empty)."""
        count = self.rows + 1 + self._history if self.rows else 0
        start = self.row - self.rows - self._history
        return (torch.arange(count, device=self.device) + start) % self.num_rows

    def _saved_rows(self, key: Key, order: torch.Tensor) -> torch.Tensor:
        """The rows of `order` that column `key` saves: all of them for observations (and
        ages), the transitions' for the rest."""
        if isinstance(key, tuple) or key == AGE:
            return order
        return order[self._history : self._history + self.rows]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, the ring in place (`finals` is reallocated if
        the saved one had grown beyond it).

        Everything is checked before anything is written: a state that does not fit leaves
        the buffer as it was.
        """
        if "rows" not in state:
            raise ValueError(
                "replay state holds explicit transitions (obs and next_obs, as rlcore saved its "
                "online buffer before it stored each observation once): it does not fit a "
                "StreamReplayBuffer"
            )
        theirs = (state["capacity"], state["num_envs"])
        if theirs != (self.capacity, self.num_envs):
            raise ValueError(
                f"replay state of capacity {theirs[0]} ({theirs[1]} envs) does not fit a "
                f"buffer of capacity {self.capacity} ({self.num_envs} envs)"
            )
        row, rows, slots = int(state["row"]), int(state["rows"]), int(state["final_slots"])
        if not (0 <= row < self.num_rows and 0 <= rows <= self._max_rows and slots >= 0):
            raise ValueError(f"replay state's row {row} / rows {rows} out of range")
        saved = state["storage"]
        finals = {key: f"{FINAL_OBS}/{key}" for key in self.spec}
        first = saved.get(next(iter(finals.values())))
        live = 0 if first is None else first.shape[0]
        every = rows + 1 + self._history if rows else 0  # rows of observation columns
        wanted = {
            column_name(k): (every if isinstance(k, tuple) or k == AGE else rows, c)
            for k, c in leaves(self.storage)
        }
        wanted |= {name: (live, self.finals[key]) for key, name in finals.items()}
        check_saved(saved, wanted)
        index = saved[FINAL_INDEX]
        outside = index.numel() and bool((index < -1).any() | (index >= live).any())
        if outside or int((index >= 0).sum()) != live:
            raise ValueError(f"replay state's final_index does not match its {live} finals")
        with self._lock:
            if max(slots, live) > self.finals.batch_size[0]:
                self.finals = allocate(self._stored, (max(slots, live),), self.device)
            self.row, self.rows = row, rows
            order = self._ring_order()
            self.storage[FINAL_INDEX].fill_(-1)
            for key, column in leaves(self.storage):
                column[self._saved_rows(key, order)] = saved[column_name(key)].to(self.device)
            for key, name in finals.items():
                self.finals[key][:live] = saved[name].to(self.device)
            self._final_head, self._final_live = live % max(self.finals.batch_size[0], 1), live
            self._row_finals[:] = self._row_valid[:] = 0
            transitions = order[self._history : self._history + rows].cpu().numpy()
            self._row_finals[transitions] = (index >= 0).sum(1).numpy()
            valid = saved[VALID].sum(1).numpy() if self.with_valid else self.num_envs
            self._row_valid[transitions] = valid
            self.size = int(self._row_valid.sum())
