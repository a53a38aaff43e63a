"""One shuffled minibatch iterator shared by every on-policy algorithm."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

Field = torch.Tensor | dict[str, torch.Tensor]
Minibatch = dict[str, Field]
"""A minibatch's tensors by rollout key, each [B, ...]; `obs` is a dict of its named
entries. Plain dicts: a TensorDict per minibatch (built, then sliced per micro-batch) was a
visible share of a small network's update (benchmarks/README.md, *versus_revision*)."""


def _plain(value: torch.Tensor | TensorDictBase) -> Field:
    """A rollout field as a tensor, or a nested one (observations) as a dict of entries."""
    return dict(value.items()) if isinstance(value, TensorDictBase) else value


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, dict):
        return {key: fn(entry) for key, entry in value.items()}
    return fn(value)


def batch_rows(batch: Minibatch) -> int:
    """Number of transitions in a minibatch."""
    first = next(iter(batch.values()))
    return next(iter(first.values())).shape[0] if isinstance(first, dict) else first.shape[0]


def selected_rows(where: torch.Tensor) -> torch.Tensor:
    """The indices of the transitions `where` selects, in env-major order (a host read on
    an accelerator: their number decides the minibatch sizes).

    Shape:
        where: [N, T] bool; return: [M] int64, indices into the N * T transitions
    """
    return where.reshape(-1).nonzero().squeeze(1)


def epoch_indices(
    total: int,
    selected: torch.Tensor | None,
    num_minibatches: int,
    generator: torch.Generator,
    device: torch.device,
) -> tuple[torch.Tensor, ...]:
    """One epoch's shuffled minibatches as indices into the `total` transitions (env-major
    order): one random permutation of them all, or of the `selected` ones, split into
    min(`num_minibatches`, count) parts; none where nothing is selected. The one order the
    eager minibatches and the compiled whole steps (`rlcore.algos.whole_step`) share."""
    count = total if selected is None else selected.numel()
    order = torch.randperm(count, generator=generator, device=device)
    perm = order if selected is None else selected[order]
    parts = min(num_minibatches, count)
    return perm.tensor_split(parts) if parts > 0 else ()


def iterate_minibatches(
    transitions: TensorDict,
    keys: Sequence[str],
    num_minibatches: int,
    generator: torch.Generator,
    where: torch.Tensor | None = None,
) -> Iterator[Minibatch]:
    """Yield `num_minibatches` disjoint random minibatches covering every transition once.

    Gathers only the requested keys, one minibatch at a time, so the extra memory is one
    minibatch rather than a shuffled copy of the rollout. With `where`, only the
    transitions where it is true are covered (GRPO's loss mask), so masked transitions cost
    no compute; with none selected (or `num_minibatches` 0), nothing is yielded.

    Shape:
        transitions: [N, T] (a `transition_view`); where: [N, T] bool
        yields: each key [B, ...] with B = M / num_minibatches for M selected transitions
        (the last may be smaller; never empty)
    """
    num_envs, num_steps = transitions.batch_size
    total = num_envs * num_steps
    selected = None
    if where is None:
        if not 1 <= num_minibatches <= total:
            raise ValueError(f"num_minibatches must be in [1, {total}], got {num_minibatches}")
    else:
        selected = selected_rows(where)
        if num_minibatches < 0:
            raise ValueError(f"num_minibatches must be >= 0, got {num_minibatches}")
    chunks = epoch_indices(total, selected, num_minibatches, generator, transitions.device)
    sources = {key: _map(_plain(transitions[key]), RowSource) for key in keys}
    for chunk in chunks:
        rows = TransitionRows(chunk, num_envs, num_steps)
        yield {
            key: _map(src, lambda t: t.take(rows))  # noqa: B023 (used at once)
            for key, src in sources.items()
        }


class TransitionRows:
    """One minibatch's transitions, `indices` into the [N, T] transitions in env-major
    order, with their row numbers in each storage layout, each computed once, however
    many fields read them."""

    def __init__(self, indices: torch.Tensor, num_envs: int, num_steps: int) -> None:
        self.env_major = indices  # env-major order is what the indices count in
        self.num_envs, self.num_steps = num_envs, num_steps
        self._split: tuple[torch.Tensor, torch.Tensor] | None = None
        self._time_major: torch.Tensor | None = None

    @property
    def env_and_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each transition's env and step indices."""
        if self._split is None:
            self._split = (self.env_major // self.num_steps, self.env_major % self.num_steps)
        return self._split

    @property
    def time_major(self) -> torch.Tensor:
        """Row t * N + i of transition (env i, step t): a rollout's storage order."""
        if self._time_major is None:
            env_idx, step_idx = self.env_and_step
            self._time_major = step_idx * self.num_envs + env_idx
        return self._time_major


class RowSource:
    """A [N, T, ...] field whose rows a minibatch gathers: with `index_select` on a flat
    view where the storage allows one (a rollout's time-major or an env-major layout), a
    fraction of the time of indexing with two index tensors at a small network's minibatch
    sizes, and the same values (benchmarks/README.md, *versus_revision*)."""

    def __init__(self, field: torch.Tensor) -> None:
        self.field = field
        self.flat: torch.Tensor | None = None
        self.time_major = False
        rows = field.shape[0] * field.shape[1]
        if field.transpose(0, 1).is_contiguous():
            self.flat, self.time_major = field.transpose(0, 1).view(rows, *field.shape[2:]), True
        elif field.is_contiguous():
            self.flat = field.view(rows, *field.shape[2:])

    def take(self, rows: TransitionRows) -> torch.Tensor:
        """The field's values at `rows`' transitions, [B, ...]."""
        if self.flat is None:
            return self.field[rows.env_and_step]
        return self.flat.index_select(0, rows.time_major if self.time_major else rows.env_major)


def epoch_minibatches(
    transitions: TensorDict,
    keys: Sequence[str],
    num_minibatches: int,
    num_epochs: int,
    generator: torch.Generator,
    where: torch.Tensor | None = None,
    prepare: Callable[[Minibatch], Minibatch] = lambda batch: batch,
) -> Iterator[Iterable[Minibatch]]:
    """Each epoch's minibatches (`iterate_minibatches`), each passed through `prepare` once.

    With one minibatch per epoch the shuffle buys nothing (every epoch sees the same rows,
    and the losses are means over them), so the rows are gathered and prepared once, in
    storage order, and the same batch serves every epoch: no per-epoch shuffle, gather or
    preparation (benchmarks/README.md, *versus_revision*, "One minibatch per epoch"). The
    generator is not drawn from.
    """
    if num_minibatches == 1:
        sources = {key: _plain(transitions[key]) for key in keys}
        if where is None:
            batch = {key: _map(src, lambda t: t.flatten(0, 1)) for key, src in sources.items()}
        else:
            batch = {key: _map(src, lambda t: t[where]) for key, src in sources.items()}
        if batch_rows(batch) == 0:
            return
        batch = prepare(batch)
        for _ in range(num_epochs):
            yield (batch,)
        return
    for _ in range(num_epochs):
        yield map(
            prepare, iterate_minibatches(transitions, keys, num_minibatches, generator, where)
        )


def minibatch_rows(batch: Minibatch, rows: slice) -> Minibatch:
    """A micro-batch: the given rows of every tensor (views, no copies)."""
    return {key: _map(value, lambda t: t[rows]) for key, value in batch.items()}
