"""Trainer: the collect -> update loop, evaluation, checkpoints and exact resume."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlcore.algos.base import Algorithm, NonFiniteError
from rlcore.algos.grpo import GRPO
from rlcore.algos.ppo import PPO
from rlcore.checkpoint import CheckpointError, config_hash, load_checkpoint, save_checkpoint
from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.config import ExperimentConfig
from rlcore.envs import make_env
from rlcore.evaluate import evaluate
from rlcore.policies import make_policy
from rlcore.rollout import OBS, REWARD, RolloutSpec, make_rollout, transition_view

log = logging.getLogger(__name__)

MetricsSink = Callable[[int, dict[str, float]], None]
"""Receives `(total_env_steps, metrics)` after every iteration and evaluation."""


@dataclass
class TrainResult:
    iterations: int
    env_steps: int
    wall_s: float
    eval_metrics: dict[str, float]
    reached_target: bool


class Trainer:
    """Owns the env, policy, rollout, collector and algorithm of one run."""

    def __init__(self, cfg: ExperimentConfig, sink: MetricsSink | None = None) -> None:
        self.cfg, self.sink = cfg, sink or (lambda step, metrics: None)
        tc = cfg.trainer
        self.env = make_env(cfg.env)
        self.eval_env = make_env(cfg.env, num_envs=tc.eval_episodes)
        device = self.env.device
        grpo = not cfg.with_critic
        # Parameters are initialised on the CPU (then moved), from a seeded fork of its RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(tc.seed)
            self.policy = make_policy(
                self.env.obs_dim, self.env.action_space, cfg.policy, with_critic=not grpo
            ).to(device)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(tc.seed + 1)
        spec = RolloutSpec.for_env(self.env, tc.num_steps, with_value=not grpo, with_mask=grpo)
        self.rollout = make_rollout(spec)
        self.algo: Algorithm
        groups = None
        if grpo:
            groups = GroupEpisodes(
                cfg.grpo.group_size,
                restart_groups=cfg.grpo.episode_mode == "restart_groups",
                reset_every_rollout=cfg.grpo.reset_every_rollout,
            )
            self.algo = GRPO(self.policy, cfg.grpo, cfg.total_iters, self.generator)
        else:
            self.algo = PPO(self.policy, cfg.ppo, cfg.total_iters, self.generator)
        self.collector = SyncCollector(
            self.env, self.policy, self.rollout, self.generator, groups=groups
        )
        self.iteration = 0
        self.collector.reset(seed=tc.seed)
        self.last_eval: dict[str, float] = {}

    @property
    def env_steps(self) -> int:
        return self.iteration * self.cfg.steps_per_iter

    def run(self, max_iters: int | None = None, checkpoint_path: Path | None = None) -> TrainResult:
        """Train until the budget, a stop target, or `max_iters` more iterations."""
        tc, start = self.cfg.trainer, time.perf_counter()
        end_iter = self.cfg.total_iters
        if max_iters is not None:
            end_iter = min(end_iter, self.iteration + max_iters)
        reached = False
        while self.iteration < end_iter and not reached:
            self._train_iteration()
            last = self.iteration == self.cfg.total_iters
            if last or (tc.eval_every_iters and self.iteration % tc.eval_every_iters == 0):
                reached = self._evaluate()
            due = tc.checkpoint_every_iters and self.iteration % tc.checkpoint_every_iters == 0
            if checkpoint_path is not None and due:
                self.save(checkpoint_path)
        if checkpoint_path is not None:
            self.save(checkpoint_path)
        return TrainResult(
            self.iteration, self.env_steps, time.perf_counter() - start, self.last_eval, reached
        )

    def _train_iteration(self) -> None:
        t0 = time.perf_counter()
        episodes = self.collector.collect()
        self._check_finite()
        t1 = time.perf_counter()
        metrics = self.algo.update(self.rollout)
        if self.policy.obs_norm is not None:
            # Updated after the update so acting and learning in one iteration share stats.
            self.policy.obs_norm.update(transition_view(self.rollout)[OBS])
        t2 = time.perf_counter()
        self.iteration += 1
        metrics |= episodes.metrics("train")
        metrics |= {
            "time/collect_s": t1 - t0,
            "time/update_s": t2 - t1,
            "time/sps": self.cfg.steps_per_iter / (t2 - t0),
            "train/iteration": float(self.iteration),
        }
        self.sink(self.env_steps, metrics)

    def _check_finite(self) -> None:
        tv = transition_view(self.rollout)
        for key, tensor in ((OBS, self.rollout[OBS]), (REWARD, tv[REWARD])):
            if not torch.isfinite(tensor).all():
                raise NonFiniteError(
                    f"the env produced a non-finite {key} in iteration {self.iteration + 1}; "
                    "training stopped and the last checkpoint was left as it was"
                )

    def _evaluate(self) -> bool:
        tc, start = self.cfg.trainer, time.perf_counter()
        self.last_eval = evaluate(self.policy, self.eval_env, seed=tc.seed + 10_000)
        self.last_eval["time/eval_s"] = time.perf_counter() - start
        self.sink(self.env_steps, self.last_eval)
        log.info("iter %d, %d env steps: %s", self.iteration, self.env_steps, self.last_eval)
        hit_return = tc.stop_at_eval_return is not None and (
            self.last_eval["eval/episode_return"] >= tc.stop_at_eval_return
        )
        hit_success = tc.stop_at_eval_success is not None and (
            self.last_eval.get("eval/success_rate", 0.0) >= tc.stop_at_eval_success
        )
        return hit_return or hit_success

    def state_dict(self) -> dict[str, Any]:
        return {
            "config_hash": config_hash(self.cfg),
            "iteration": self.iteration,
            "policy": self.policy.state_dict(),
            "algo": self.algo.state_dict(),
            "env": self.env.state_dict(),
            "collector": self.collector.state_dict(),
            "generator": self.generator.get_state(),
        }

    def save(self, path: Path) -> None:
        """Write a checkpoint atomically (temp file + rename)."""
        save_checkpoint(path, self.state_dict())

    def load(self, path: Path) -> None:
        """Restore a checkpoint of the same configuration to continue bit-identically."""
        state = load_checkpoint(path, map_location=self.env.device)
        expected = config_hash(self.cfg)
        if state["config_hash"] != expected:
            raise CheckpointError(
                f"checkpoint {path} was written by a different configuration "
                f"(hash {state['config_hash']}, this run {expected}); use a new run directory"
            )
        self.policy.load_state_dict(state["policy"])
        self.algo.load_state_dict(state["algo"])
        self.env.load_state_dict(state["env"])
        self.collector.load_state_dict(state["collector"])
        self.generator.set_state(state["generator"])
        self.iteration = int(state["iteration"])
