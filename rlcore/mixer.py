"""DataMixer: SAC batches drawn partly from an offline dataset, partly from online experience.

LeRobot's `OnlineOfflineMixer` idea: the learner asks for one batch; a fixed share of its
rows comes from the offline buffer (demonstrations, a recorded policy) and the rest from
the online replay buffer, in one preallocated batch. The two may store transitions in
different layouts (the online buffer each observation once, a dataset `obs` and `next_obs`):
both sample into the same batch layout (`rlcore.replay`), which is what has to match.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlcore.replay import TransitionSource, column_name, leaves


class DataMixer:
    """Batches with `round(offline_fraction * B)` offline rows first, online rows after.

    Fraction 0 (or no offline buffer) samples online only; fraction 1 samples offline only
    (offline training: the online buffer may stay empty). The returned batch is reused by
    the next `sample` of the same size.
    """

    def __init__(
        self, online: TransitionSource, offline: TransitionSource | None, offline_fraction: float
    ) -> None:
        if not 0.0 <= offline_fraction <= 1.0:
            raise ValueError(f"offline_fraction must be in [0, 1], got {offline_fraction}")
        if offline is None and offline_fraction > 0:
            raise ValueError("offline_fraction > 0 needs an offline buffer")
        if offline is not None:
            _check_same_layout(online, offline)
        self.online, self.offline = online, offline
        self.offline_fraction = offline_fraction
        self._batches: dict[int, tuple[TensorDict, TensorDict | None, TensorDict | None]] = {}

    def sample(self, batch_size: int) -> TensorDict:
        """One batch of `batch_size` transitions (offline rows first).

        Each side gathers straight into its rows of the one batch, allocated on the first
        call of each size; nothing is allocated afterwards.
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        cached = self._batches.get(batch_size)
        if cached is None:
            k = round(self.offline_fraction * batch_size)
            batch = self.online.empty_batch(batch_size)
            cached = (batch, batch[:k] if k else None, batch[k:] if k < batch_size else None)
            self._batches[batch_size] = cached
        batch, offline_rows, online_rows = cached
        if offline_rows is not None:
            assert self.offline is not None
            if len(self.offline) == 0:
                raise ValueError("cannot draw offline rows: the offline dataset is empty")
            self.offline.sample(offline_rows.batch_size[0], out=offline_rows)
        if online_rows is not None:
            if len(self.online) == 0:
                raise ValueError(
                    f"cannot draw {online_rows.batch_size[0]} online rows: the online replay "
                    "buffer is empty (offline_fraction 1 trains without online data)"
                )
            self.online.sample(online_rows.batch_size[0], out=online_rows)
        return batch


def _check_same_layout(online: TransitionSource, offline: TransitionSource) -> None:
    """Both buffers sample the same keys, shapes and dtypes; the error names what differs."""

    def columns(buffer: TransitionSource) -> dict[str, torch.Tensor]:
        return {column_name(key): c for key, c in leaves(buffer.empty_batch(0))}

    mine_all, theirs_all = columns(online), columns(offline)
    if set(mine_all) != set(theirs_all):
        raise ValueError(
            f"the offline dataset holds {sorted(theirs_all)}, the env's transitions "
            f"{sorted(mine_all)}"
        )
    for key, mine in mine_all.items():  # obs first: the likeliest to differ
        theirs = theirs_all[key]
        if mine.shape[1:] != theirs.shape[1:] or mine.dtype != theirs.dtype:
            raise ValueError(
                f"the offline dataset's {key} is {_describe(theirs)} but the env's is "
                f"{_describe(mine)}"
            )


def _describe(column: torch.Tensor) -> str:
    return f"{str(column.dtype).removeprefix('torch.')} of shape {list(column.shape[1:])}"
