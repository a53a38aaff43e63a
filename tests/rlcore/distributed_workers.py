"""Code run inside each of the gloo processes that tests/rlcore/test_distributed.py starts.

A module of its own so the spawned processes can import it by name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp
from gymnasium import spaces

from rlcore.algos.config import PPOConfig
from rlcore.algos.sgd import PolicyOptimizer
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig, TrainerConfig
from rlcore.distributed import Distributed, DistributedError
from rlcore.policies import make_policy
from rlcore.trainer import Trainer

Worker = Callable[..., dict[str, Any]]
DEADLINE_S = 300


def run_ranks(worker: Worker, tmp: Path, *args: Any, world: int = 2) -> list[dict[str, Any]]:
    """Run `worker(dist, tmp, *args)` in `world` gloo processes; return each rank's result.

    A rank stuck in a collective fails the test after `DEADLINE_S` instead of hanging it.
    """
    context = mp.start_processes(
        _entry, args=(worker, world, str(tmp), args), nprocs=world, join=False
    )
    deadline = time.monotonic() + DEADLINE_S
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"{worker.__name__} did not finish in {DEADLINE_S} s")
    return [torch.load(tmp / f"result{rank}.pt", weights_only=False) for rank in range(world)]


def _entry(rank: int, worker: Worker, world: int, tmp: str, args: tuple[Any, ...]) -> None:
    torch.set_num_threads(1)
    # What torchrun sets, so code that reads it (pipelines' train stage) sees this rank; the
    # group itself meets through a file, free of ports.
    env = {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": rank, "MASTER_ADDR": "localhost"}
    os.environ.update({key: str(value) for key, value in env.items()} | {"MASTER_PORT": "0"})
    torch_dist.init_process_group(
        "gloo",
        init_method=f"file://{tmp}/rendezvous",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=DEADLINE_S),
    )
    try:
        result = worker(Distributed(rank=rank, world_size=world, local_rank=rank), Path(tmp), *args)
        torch.save(result, Path(tmp) / f"result{rank}.pt")
    finally:
        if torch_dist.is_initialized():
            torch_dist.destroy_process_group()


def rank_data(rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Observations and actions that differ between ranks (and between calls by `size`)."""
    gen = torch.Generator().manual_seed(100 * rank + size)
    return torch.randn(size, 4, generator=gen), torch.randn(size, 2, generator=gen)


def small_policy() -> torch.nn.Module:
    torch.manual_seed(0)
    box = spaces.Box(-1.0, 1.0, shape=(2,))
    return make_policy(4, box, PolicyConfig(hidden_sizes=(8,)), with_critic=False)


def mean_loss(policy: torch.nn.Module, obs: torch.Tensor, action: torch.Tensor):
    """A loss that is a mean over samples, with a stats vector, as the algorithms return."""
    loss = -policy.evaluate(obs, action).log_prob.mean()
    return loss, torch.stack([loss.detach(), obs.mean()])


def gradient_worker(dist: Distributed, tmp: Path, sizes: list[int]) -> dict[str, Any]:
    """One optimizer step on this rank's own data; then several more."""
    policy = small_policy()
    optimizer = PolicyOptimizer(policy, 1e-2, 1e-8, "constant", 10, dist=dist)
    obs, action = rank_data(dist.rank, sizes[dist.rank])
    stats = optimizer.step(
        len(obs), None, lambda rows: mean_loss(policy, obs[rows], action[rows]), None
    )
    grads = [p.grad.clone() for p in policy.parameters()]
    for step in range(5):
        obs, action = rank_data(dist.rank, sizes[dist.rank] + 1 + step)
        loss_fn = lambda rows, obs=obs, action=action: mean_loss(policy, obs[rows], action[rows])  # noqa: E731
        optimizer.step(len(obs), 3, loss_fn, 0.5)
    return {
        "grads": grads,
        "stats": stats,
        "params": [p.detach().clone() for p in policy.parameters()],
    }


def collectives_worker(dist: Distributed, tmp: Path) -> dict[str, Any]:
    obs = rank_data(dist.rank, 5 + 3 * dist.rank)[0]
    where = torch.zeros(4, 8, dtype=torch.bool)
    where.view(-1)[: 3 + 7 * dist.rank] = True  # rank 0 selects 3 transitions, rank 1 ten
    return {
        "moments": dist.pooled_moments(obs),
        "count": dist.common_minibatch_count(4, where),
        "count_unmasked": dist.common_minibatch_count(4, None),
        "seed": dist.seed(7),
    }


def experiment(algorithm: str = "ppo", **trainer: Any) -> ExperimentConfig:
    return ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=8),
        policy=PolicyConfig(hidden_sizes=(16, 16), normalize_obs=True),
        algo=PPOConfig(num_epochs=2, num_minibatches=2, lr_schedule="linear")
        if algorithm == "ppo"
        else None,
        trainer=TrainerConfig(
            total_env_steps=8 * 16 * 2 * 6,
            num_steps=16,
            eval_every_iters=3,
            eval_episodes=2,
            **trainer,
        ),
        algorithm=algorithm,
    )


def flat_params(trainer: Trainer) -> torch.Tensor:
    return torch.cat([t.detach().flatten().double() for t in trainer.policy.state_dict().values()])


def training_worker(dist: Distributed, tmp: Path, algorithm: str) -> dict[str, Any]:
    """Train; then straight vs saved-and-resumed, and what rank 0 alone wrote."""
    cfg = experiment(algorithm)
    sink_calls: list[int] = []
    first = Trainer(cfg, sink=lambda steps, metrics: sink_calls.append(steps), dist=dist)
    start = flat_params(first)
    first_obs = first.rollout["obs", "state"][:, 0].clone()
    first.run(max_iters=2)
    first.save(tmp / f"written_by_rank{dist.rank}.pt", extra={"note": "kept"})
    after_two = flat_params(first)
    first.run()  # to the end of the budget: 6 iterations

    resumed = Trainer(cfg, dist=dist)
    extra = resumed.load(tmp / "written_by_rank0.pt")  # only rank 0 has (and reads) it
    iteration_after_load = resumed.iteration
    resumed.run()
    return {
        "start": start,
        "after_two": after_two,
        "straight": flat_params(first),
        "resumed": flat_params(resumed),
        "straight_env": first.env.state_dict(),
        "resumed_env": resumed.env.state_dict(),
        "first_obs": first_obs,
        "iteration_after_load": iteration_after_load,
        "extra": extra,
        "env_steps": first.env_steps,
        "iterations": first.iteration,
        "sink_calls": sink_calls,
        "has_eval_env": first.eval_env is not None,
    }


def unsynchronised_worker(dist: Distributed, tmp: Path) -> dict[str, Any]:
    """The seed's bug on purpose: each rank steps on its own gradients."""
    trainer = Trainer(experiment(), dist=dist)
    trainer.algo.optimizer.dist = Distributed()  # bypass the averaging, as the seed did
    try:
        trainer.run(max_iters=1)
    except DistributedError as exc:
        return {"error": str(exc)}
    return {"error": None}
