"""An iteration's results while they wait on the device: what lets a training iteration
run without a host read (`rlcore.trainer.Trainer.sync_every`).

The trainer keeps each iteration's metrics (floats, or 0-d tensors an algorithm left on the
device), episode totals and env checks here, then reads all of them in one transfer per
device (`read_pending`) when it next must: at a logging boundary, an evaluation, a
checkpoint or the end of a run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.episodes import EpisodeStats


@dataclass
class PendingIteration:
    """An iteration's results while they wait on the device (`Trainer.sync_every`)."""

    iteration: int
    steps_done: int
    metrics: dict[str, float | torch.Tensor]
    timing: dict[str, float]
    episodes: EpisodeStats | None
    totals: torch.Tensor | None
    env_flags: torch.Tensor | None

    def tensors(self) -> list[torch.Tensor]:
        """What must be read from the device, in the order `read` consumes it."""
        found = [v for v in self.metrics.values() if isinstance(v, torch.Tensor)]
        found += [t for t in (self.totals, self.env_flags) if t is not None]
        return found

    def read(self, values: Iterator[list[float]]) -> tuple[dict[str, Any], list[float] | None]:
        """The metrics as floats (with the episodes') and the env checks' flags, from
        `values`: the host copies of `tensors()`, in order."""
        host: dict[str, Any] = {
            key: next(values)[0] if isinstance(value, torch.Tensor) else value
            for key, value in self.metrics.items()
        }
        if self.totals is not None:
            assert self.episodes is not None
            totals = torch.tensor(next(values), dtype=torch.float64)
            host |= self.episodes.metrics("train", totals=totals)
        host |= self.timing
        return host, None if self.env_flags is None else next(values)


def read_host(tensors: list[torch.Tensor]) -> list[list[float]]:
    """Each tensor's values as a list of floats, with one transfer per device."""
    out: list[list[float]] = [[] for _ in tensors]
    by_device: dict[torch.device, list[int]] = {}
    for i, tensor in enumerate(tensors):
        by_device.setdefault(tensor.device, []).append(i)
    for ids in by_device.values():
        parts = [tensors[i].detach().reshape(-1).to(torch.float64) for i in ids]
        flat = torch.cat(parts).tolist()
        start = 0
        for i, part in zip(ids, parts, strict=True):
            out[i] = flat[start : start + part.numel()]
            start += part.numel()
    return out


def read_pending(
    pending: list[PendingIteration],
) -> Iterator[tuple[PendingIteration, dict[str, Any], list[float] | None]]:
    """Each waiting iteration with its metrics as floats and its env checks' flags (None
    where they were checked at once), all read in one transfer per device."""
    values = iter(read_host([t for item in pending for t in item.tensors()]))
    for item in pending:
        host, env_flags = item.read(values)
        yield item, host, env_flags
