"""Trainer: the collect -> update loop, evaluation, checkpoints and exact resume."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlcore.algos.base import Algorithm, AlgorithmContext
from rlcore.algos.compile import check_compile_available
from rlcore.algos.registry import algorithm_spec
from rlcore.checkpoint import (
    RESUME_FORMAT,
    CheckpointError,
    config_hash,
    read_resumable,
    save_checkpoint,
    to_cpu,
)
from rlcore.collection_graph import graph_refusal
from rlcore.collector import SyncCollector
from rlcore.config import EnvConfig, ExperimentConfig
from rlcore.distributed import Distributed
from rlcore.envs import make_env
from rlcore.envs.base import BatchedEnv
from rlcore.errors import ConfigError
from rlcore.evaluate import evaluate
from rlcore.finite import nonfinite_flags, raise_if_env_nonfinite, raise_if_loss_nonfinite
from rlcore.pending import PendingIteration, read_pending
from rlcore.rollout import OBS, RolloutSpec, make_rollout, transition_view

if TYPE_CHECKING:
    from rlcore.off_policy import OffPolicyLearner

log = logging.getLogger(__name__)

MetricsSink = Callable[[int, dict[str, float]], None]
"""Receives `(steps_done, metrics)` after every iteration and evaluation (rank 0 only): env
steps collected so far (offline only: their worth in gradient steps; see `Trainer.steps_done`)."""


@dataclass
class TrainResult:
    """What `Trainer.run` returns: where the run stands, this call's wall time, the last
    evaluation's metrics and whether a stop target was reached."""

    iterations: int
    env_steps: int
    wall_s: float
    eval_metrics: dict[str, float]
    reached_target: bool


def _refuse_mismatches(cfg: ExperimentConfig, off_policy: bool, world_size: int) -> None:
    """Refuse what the algorithm cannot train, before any env is built."""
    if cfg.replay.offline is not None and not off_policy:
        raise ConfigError(
            f"replay.offline feeds off-policy algorithms (sac); {cfg.algorithm!r} learns "
            "from its own rollouts only: remove replay.offline or use sac"
        )
    if off_policy and world_size > 1:
        raise ConfigError(
            f"algorithm.name {cfg.algorithm!r} is off-policy and trains in one process: "
            f"set runtime.processes to 1 (got {world_size})"
        )


class Trainer:
    """Owns the env, policy, rollout, collector and algorithm of one run (of one rank).

    The algorithm comes from the registry (`cfg.algorithm`, `rlcore.algos.registry`): it
    builds the policy and itself. An on-policy algorithm updates on each filled rollout; an
    off-policy one (SAC) learns through `self.replay` (`rlcore.off_policy`), which stores
    every rollout in a replay buffer and takes gradient steps on sampled batches.

    With `dist` (one rank of a torchrun job, see `rlcore.distributed`), every rank steps its
    own `env.num_envs` envs from its own seed, gradients are averaged over ranks at every
    optimizer step, and rank 0 alone evaluates and calls the sink; `save` and `load` are
    collective (every rank calls them) and rank 0 alone touches the file. An iteration
    then collects `world_size` times as many env steps, so the same `total_env_steps`
    takes `world_size` times fewer iterations.

    `compile_loss` runs the algorithm's loss through `torch.compile` (see
    `rlcore.algos.compile`; PPO compiles its whole minibatch step, `rlcore.algos.whole_step`):
    a runtime choice like the thread count, so it is not part of the config whose hash
    guards resumption.

    `sync_every` is how many iterations' metrics wait on the device before the trainer
    reads them (and checks them and the env's outputs for non-finite values) and hands
    them to the sink, in order: with 1, every iteration; with more, an iteration whose
    parts keep their results on the device (builtin envs, PPO's whole step) never waits
    for the device. Evaluations, checkpoints and the end of `run` read them first, so a
    non-finite value stops training before any checkpoint holds it.
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        sink: MetricsSink | None = None,
        dist: Distributed | None = None,
        compile_loss: bool = False,
        sync_every: int = 1,
    ) -> None:
        if sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.sync_every = sync_every
        self._pending: list[PendingIteration] = []
        self.cfg, self.sink = cfg, sink or (lambda step, metrics: None)
        self.dist = dist = dist or Distributed()
        tc = cfg.trainer
        algorithm = algorithm_spec(cfg.algorithm).load()
        _refuse_mismatches(cfg, algorithm.off_policy, dist.world_size)
        env_cfg = replace(cfg.env, device=dist.device(cfg.env.device))
        if compile_loss:  # before building envs, which may take long (simulators, processes)
            check_compile_available(torch.device(env_cfg.device))
        self.env, self.eval_env = self._make_envs(env_cfg, algorithm.same_step_reset)
        device = self.env.device
        # Parameters are initialised on the CPU (then moved), from a seeded fork of its RNG;
        # every rank starts from rank 0's (identical already, but made sure).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(tc.seed)
            self.policy = algorithm.make_policy(
                self.env.obs_spec, self.env.action_space, cfg.policy, cfg.algo
            ).to(device)
        dist.broadcast_module(self.policy)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(dist.seed(tc.seed) + 1)
        context = AlgorithmContext(
            cfg.algo, cfg, self.policy, self.env, self.total_iters, self.generator, dist,
            compile_loss,
        )  # fmt: skip
        self.algo: Algorithm = algorithm.build(context)
        groups = self.algo.groups
        spec = RolloutSpec.for_env(
            self.env,
            tc.num_steps,
            with_value=self.policy.has_critic,
            with_mask=groups is not None,
            with_final_obs=algorithm.off_policy,
        )
        self.rollout = make_rollout(spec)
        # With compiling on, the collector bootstraps time-limit ends without a host check
        # (unless the env steps on the host, where the check costs no sync and saves a
        # critic forward each step), and, where the env allows (builtin envs on CUDA),
        # replays its steps as a CUDA graph: on-policy, ungrouped collection (PPO's), the
        # one run on a GPU so far.
        host_checks = not compile_loss or self.env.steps_on_host
        graph_steps = (
            compile_loss
            and not algorithm.off_policy
            and graph_refusal(self.env, host_checks=False, grouped=groups is not None) is None
        )
        self.collector = SyncCollector(
            self.env, self.policy, self.rollout, self.generator, groups=groups,
            host_checks=host_checks, graph_steps=graph_steps,
        )  # fmt: skip
        # The off-policy loop (replay buffer, warm-up, update-to-data ratio), if any.
        self.replay: OffPolicyLearner | None = None
        if algorithm.off_policy:
            from rlcore.off_policy import OffPolicyLearner

            self.replay = OffPolicyLearner(cfg, self.env, self.algo, self.generator)
        self.iteration = 0
        self.collector.reset(seed=dist.seed(tc.seed))
        self.last_eval: dict[str, float] = {}

    def _make_envs(
        self, env_cfg: EnvConfig, every_step_a_transition: bool
    ) -> tuple[BatchedEnv, BatchedEnv | None]:
        """The training envs, and the evaluation envs on rank 0 (none elsewhere)."""
        tc = self.cfg.trainer
        env = make_env(env_cfg, every_step_a_transition=every_step_a_transition)
        if tc.stop_at_eval_success is not None and not env.has_success:
            env.close()
            raise ConfigError(
                f"trainer.stop_at_eval_success: {self.cfg.env.name!r} reports no success, so "
                f"{tc.stop_at_eval_success:g} could never be reached: set it to null (or use "
                "trainer.stop_at_eval_return)"
            )
        eval_env = make_env(env_cfg, num_envs=tc.eval_episodes) if self.dist.is_main else None
        return env, eval_env

    @property
    def steps_per_iter(self) -> int:
        """Env steps of one iteration, summed over ranks."""
        return self.cfg.steps_per_iter * self.dist.world_size

    @property
    def total_iters(self) -> int:
        """Iterations the env-step budget buys, all ranks' steps counted."""
        return max(self.cfg.trainer.total_env_steps // self.steps_per_iter, 1)

    @property
    def env_steps(self) -> int:
        """Env steps collected so far, summed over ranks (none when training offline only)."""
        if self.replay is not None and self.replay.offline_only:
            return 0
        return self.iteration * self.steps_per_iter

    @property
    def steps_done(self) -> int:
        """Progress in the units of `trainer.total_env_steps`: the env steps collected, or,
        training offline only, the env steps whose gradient steps were taken. The x axis of
        the metrics sink, so an offline run's curve moves along like an online one's."""
        return self.iteration * self.steps_per_iter

    def run(
        self,
        max_iters: int | None = None,
        checkpoint_path: Path | None = None,
        every: int | None = None,
        after: Callable[[Trainer], None] | None = None,
    ) -> TrainResult:
        """Train until the budget, a stop target, or `max_iters` more iterations.

        The one training loop: the `train` stage, search trials and library scripts all
        call it. `after(self)` runs whenever the iteration count reaches a multiple of
        `every` and the run goes on (the stage saves resumable progress there, a search
        trial reports to its pruner). `checkpoint_path` is the plain case: save there
        every `trainer.checkpoint_every_iters` iterations and at the end.
        """
        tc, start = self.cfg.trainer, time.perf_counter()
        if checkpoint_path is not None:
            if after is not None:
                raise ValueError("give checkpoint_path or after, not both")
            every, after = tc.checkpoint_every_iters or None, lambda t: t.save(checkpoint_path)
        end_iter = self.total_iters
        if max_iters is not None:
            end_iter = min(end_iter, self.iteration + max_iters)
        reached = False
        while self.iteration < end_iter and not reached:
            self._train_iteration()
            last = self.iteration == self.total_iters
            if last or (tc.eval_every_iters and self.iteration % tc.eval_every_iters == 0):
                reached = self._evaluate()
            goes_on = not (last or reached)
            if after is not None and every and self.iteration % every == 0 and goes_on:
                after(self)
        self.flush()
        if checkpoint_path is not None:
            self.save(checkpoint_path)
        return TrainResult(
            self.iteration, self.env_steps, time.perf_counter() - start, self.last_eval, reached
        )

    def _train_iteration(self) -> None:
        t0 = time.perf_counter()
        replay = self.replay
        env_flags = None
        if replay is not None and replay.offline_only:
            episodes = None  # no env steps: every batch comes from the dataset
        else:
            acting = replay.warmup_policy() if replay is not None else None
            episodes = self.collector.collect(policy=acting)
            if self.sync_every == 1:
                raise_if_env_nonfinite(
                    self.rollout, nonfinite_flags(self.rollout), self.iteration + 1
                )
            else:
                env_flags = nonfinite_flags(self.rollout)
        t1 = time.perf_counter()
        if replay is None:
            metrics: dict[str, float | torch.Tensor] = dict(self.algo.update(self.rollout))
        else:
            metrics = dict(replay.learn(self.rollout if episodes is not None else None))
        if self.policy.obs_norm is not None and episodes is not None:
            # Updated after the update so acting and learning in one iteration share stats.
            # Ranks merge the moments of all ranks' observations, so all keep equal stats.
            obs = transition_view(self.rollout)[OBS]
            self.policy.inputs.merge(obs, self.dist.pooled_moments)
        self.iteration += 1
        self.dist.check_in_sync(self.policy, f"after iteration {self.iteration}")
        t2 = time.perf_counter()
        totals = None
        if episodes is not None:
            # Episodes that finished on any rank (sums over ranks; a no-op for one process).
            totals = episodes.totals()
            if self.dist.enabled:
                totals = self.dist.sum(totals.cpu())
        timing = {
            "time/collect_s": t1 - t0,
            "time/update_s": t2 - t1,
            "time/sps": self.steps_per_iter / (t2 - t0),
            "train/iteration": float(self.iteration),
        }
        self._pending.append(
            PendingIteration(
                self.iteration, self.steps_done, metrics, timing, episodes, totals, env_flags
            )
        )
        if len(self._pending) >= self.sync_every:
            self.flush()

    def flush(self) -> None:
        """Read the waiting iterations' metrics from the device (one transfer per device),
        check them, and hand them to the sink in order (see `sync_every`)."""
        pending, self._pending = self._pending, []
        for item, host, env_flags in read_pending(pending):
            if env_flags is not None:
                raise_if_env_nonfinite(self.rollout, env_flags, item.iteration)
            raise_if_loss_nonfinite(self.cfg.algorithm, host, item.iteration)
            if self.dist.is_main:
                self.sink(item.steps_done, host)

    def _evaluate(self) -> bool:
        """Evaluate on rank 0; True on every rank if a stop target was reached."""
        reached = False
        self.flush()
        if self.dist.is_main:
            tc, start = self.cfg.trainer, time.perf_counter()
            assert self.eval_env is not None
            self.last_eval = evaluate(self.policy, self.eval_env, seed=tc.seed + 10_000)
            self.last_eval["time/eval_s"] = time.perf_counter() - start
            self.sink(self.steps_done, self.last_eval)
            log.info("iter %d, %d env steps: %s", self.iteration, self.env_steps, self.last_eval)
            hit_return = tc.stop_at_eval_return is not None and (
                self.last_eval["eval/episode_return"] >= tc.stop_at_eval_return
            )
            hit_success = tc.stop_at_eval_success is not None and (
                self.last_eval.get("eval/success_rate", 0.0) >= tc.stop_at_eval_success
            )
            reached = hit_return or hit_success
        return bool(self.dist.broadcast_object(reached))

    def _rank_state(self) -> dict[str, Any]:
        """What differs between ranks: envs, episode bookkeeping, random streams (on CPU)."""
        state = {
            "env": self.env.state_dict(),
            "collector": self.collector.state_dict(),
            "generator": self.generator.get_state(),
        }
        if self.replay is not None:
            state["replay"] = self.replay.state_dict()
        state["algo"] = self.algo.rank_state_dict()  # e.g. PPO's per-env running returns
        return to_cpu(state)

    def save(self, path: Path, extra: dict[str, Any] | None = None) -> None:
        """Write a checkpoint atomically (temp file + rename), with `extra` entries beside.

        Collective: every rank calls it; rank 0 gathers the per-rank states and alone
        writes the file. The shared state (policy, optimizer) is rank 0's, as every rank
        holds the same (checked after every iteration).
        """
        self.flush()
        ranks = self.dist.gather_object(self._rank_state())
        if self.dist.is_main:
            state = {
                "resume_format": RESUME_FORMAT,
                "config_hash": config_hash(self.cfg),
                "iteration": self.iteration,
                "policy": self.policy.state_dict(),
                "algo": self.algo.state_dict(),
                "ranks": ranks,
            }
            save_checkpoint(path, {**(extra or {}), **state})

    def load(self, path: Path) -> dict[str, Any]:
        """Restore a checkpoint of the same configuration to continue bit-identically.

        Collective: rank 0 alone reads the file (no shared filesystem needed) and sends
        each rank its own part. Returns the `extra` entries it was saved with.
        """
        state, error = None, None
        if self.dist.is_main:
            try:
                state = read_resumable(path, self.cfg, self.dist.world_size)
            except CheckpointError as exc:
                error = str(exc)
        error = self.dist.broadcast_object(error)
        if error is not None:
            raise CheckpointError(error)
        mine = self.dist.scatter_object(state.pop("ranks") if state is not None else None)
        state = self.dist.broadcast_object(state)
        self.policy.load_state_dict(state.pop("policy"))
        self.algo.load_state_dict(state.pop("algo"))
        self.env.load_state_dict(mine["env"])
        self.collector.load_state_dict(mine["collector"])
        self.generator.set_state(mine["generator"])
        if self.replay is not None:
            self.replay.load_state_dict(mine["replay"])
        self.algo.load_rank_state_dict(mine.get("algo", {}))
        self.iteration = int(state.pop("iteration"))
        del state["config_hash"]
        return state
