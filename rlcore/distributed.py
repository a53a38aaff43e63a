"""Data-parallel training over torch.distributed: one process per device, launched by torchrun.

Every rank collects its own rollouts with its own envs and random streams; the ranks keep one
set of parameters by averaging gradients in the single optimizer step every algorithm uses
(`rlcore.algos.sgd.PolicyOptimizer.step`). There is no wrapped module whose method could be
called around the reduction (the flaw of the seed's DistributedDataParallel path, where
calling `ddp.module.evaluate` skipped the reducer and every GPU silently trained alone), and
`Distributed.check_in_sync` compares the parameters of all ranks bit for bit after every
iteration, so a regression stops the run instead of going unnoticed.

A single process uses `Distributed()` (world size 1): every method is then a no-op and no
process group is created.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from rlcore.errors import DistributedError

RANK_SEED_STRIDE = 2**31 - 1
"""Rank r of a run with seed s uses s + r * stride: its own streams, which never coincide
with another (small) seed's rank 0 (with s + r, seed 0's rank 1 would replay seed 1's run).
Odd and below 2**32, since torch's CPU generator keeps only a seed's low 32 bits."""

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launched_by_torchrun() -> bool:
    """Whether this process is one rank of a `torchrun` (or `elastic_launch`) job."""
    return all(name in os.environ for name in _TORCHRUN_VARS)


@dataclass(frozen=True)
class Distributed:
    """This process's place in a data-parallel run and the collectives the trainer needs."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 alone evaluates and writes checkpoints, metrics, video and reports."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """Whether there are other ranks to average with (world size above 1)."""
        return self.world_size > 1

    def seed(self, base: int) -> int:
        """This rank's seed for envs and sampling (see `RANK_SEED_STRIDE`)."""
        return base + self.rank * RANK_SEED_STRIDE

    def device(self, requested: str) -> str:
        """The device of this rank: on CUDA, one GPU per local rank (`cuda:LOCAL_RANK`)."""
        if not self.enabled or not requested.startswith("cuda"):
            return requested
        if ":" in requested:
            raise DistributedError(
                f"env.device {requested!r} names one GPU, but {self.world_size} processes "
                "each need their own: set env.device to 'cuda' (rank r then uses its "
                "node's GPU LOCAL_RANK), or restrict the GPUs with CUDA_VISIBLE_DEVICES"
            )
        return f"cuda:{self.local_rank}"

    def average_gradients(
        self, parameters: Sequence[torch.Tensor], weight: float, stats: torch.Tensor
    ) -> torch.Tensor:
        """Replace every rank's gradients by their `weight`-weighted mean over ranks.

        `weight` is the number of samples this rank's loss averaged over, so the result is
        the gradient of the mean loss over all ranks' samples together, even when ranks had
        minibatches of different sizes. `stats` (the loss statistics) are averaged the same
        way in the same single all-reduce; the averaged stats are returned.
        """
        if not self.enabled:
            return stats
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        one = torch.ones(1, dtype=stats.dtype, device=stats.device)
        flat = torch.cat([*(g.reshape(-1) for g in grads), stats.reshape(-1), one])
        flat.mul_(weight)
        dist.all_reduce(flat)
        flat.div_(flat[-1].clone())
        offset = 0
        for param, grad in zip(parameters, grads, strict=True):
            size = grad.numel()
            if param.grad is None:
                param.grad = grad
            param.grad.copy_(flat[offset : offset + size].view_as(grad))
            offset += size
        return flat[offset:-1].view_as(stats)

    def pooled_moments(self, batch: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        """Count, mean and (biased) variance per feature of all ranks' `[B, D]` batches."""
        batch = batch.reshape(-1, batch.shape[-1]).double()
        count = float(batch.shape[0])
        if not self.enabled:
            return count, batch.mean(0), batch.var(0, unbiased=False)
        sums = torch.cat([batch.new_tensor([count]), batch.sum(0), batch.square().sum(0)])
        dist.all_reduce(sums)
        dim = batch.shape[-1]
        total = sums[0].item()
        mean = sums[1 : 1 + dim] / total
        var = (sums[1 + dim :] / total - mean.square()).clamp_(min=0.0)
        return total, mean, var

    def common_minibatch_count(self, num_minibatches: int, where: torch.Tensor | None) -> int:
        """How many minibatches every rank can fill from its selected transitions.

        Each optimizer step all-reduces, so all ranks must take the same number of steps;
        with a selection mask (GRPO's loss mask, an env's invalid steps) ranks select
        different numbers of transitions, and a rank with fewer than `num_minibatches`
        would otherwise take fewer steps and leave the others waiting forever.
        """
        if not self.enabled or where is None:
            return num_minibatches
        count = torch.tensor([min(num_minibatches, int(where.sum().item()))])
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        return int(count.item())

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Elementwise sum over ranks (in place; returned for chaining)."""
        if self.enabled:
            dist.all_reduce(values)
        return values

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Give every rank rank 0's parameters and buffers (the start of data parallelism)."""
        if not self.enabled:
            return
        with torch.no_grad():
            for tensor in _tensors(module):
                dist.broadcast(tensor, src=0)

    def check_in_sync(self, module: torch.nn.Module, when: str) -> None:
        """Raise on every rank if any rank's parameters or buffers differ from rank 0's."""
        if not self.enabled:
            return
        with torch.no_grad():
            # One collective: the elementwise max over ranks of (x, -x) is (max, -min), and
            # every rank holds the same values exactly when max == min everywhere.
            mine = torch.cat([t.reshape(-1).double() for t in _tensors(module)])
            extremes = torch.cat([mine, -mine])
            dist.all_reduce(extremes, op=dist.ReduceOp.MAX)
            highest, lowest = extremes.chunk(2)
            differs = bool((highest != -lowest).any())
        if differs:
            raise DistributedError(
                f"the policy's parameters differ between ranks {when}: gradients were not "
                "averaged over ranks (or a rank updated on its own), so each process would "
                "train a different policy; stopping instead"
            )

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (pickled; for small control data)."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_object(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        if not self.enabled:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def scatter_object(self, objs: list[Any] | None) -> Any:
        """Element `rank` of rank 0's list `objs` (ignored on the other ranks)."""
        if not self.enabled:
            assert objs is not None
            return objs[0]
        out: list[Any] = [None]
        dist.scatter_object_list(out, objs if self.is_main else None, src=0)
        return out[0]


def _tensors(module: torch.nn.Module) -> Iterable[torch.Tensor]:
    yield from module.parameters()
    yield from module.buffers()


@contextmanager
def process_group_from_env(device: str) -> Iterator[Distributed]:
    """Join the torchrun job this process belongs to, or run alone when not launched by it.

    The backend follows the device: gloo on CPU; NCCL for CUDA tensors (with gloo beside
    it for the small pickled control messages). Rendezvous uses torchrun's environment
    variables, so every torchrun setup (one node, several nodes, a c10d rendezvous
    endpoint) works unchanged. A process group this creates is destroyed on exit; one
    that already existed (created by the caller) is used and left alone.
    """
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        yield Distributed()
        return
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    backend = "gloo"
    if not device.startswith(("cpu", "cuda")):
        raise DistributedError(
            f"env.device {device!r}: several processes train on 'cpu' (gloo) or 'cuda' "
            "(NCCL) devices only"
        )
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DistributedError("env.device is CUDA but this process sees no GPU")
        if local_rank >= torch.cuda.device_count():
            raise DistributedError(
                f"LOCAL_RANK {local_rank} has no GPU: this node has "
                f"{torch.cuda.device_count()}; start at most that many processes per node"
            )
        torch.cuda.set_device(local_rank)
        backend = "cpu:gloo,cuda:nccl"
    created = not dist.is_initialized()
    if created:
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
    try:
        yield Distributed(rank=rank, world_size=world, local_rank=local_rank)
    finally:
        if created and dist.is_initialized():
            dist.destroy_process_group()
