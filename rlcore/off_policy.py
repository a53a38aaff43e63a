"""The off-policy half of a training iteration: rollout -> replay buffer -> gradient steps.

The trainer collects `num_envs x num_steps` env steps into the shared rollout exactly as
on-policy (the collector also keeps each done transition's true final observation), then
hands the rollout to `OffPolicyLearner.learn`, which appends it to the replay buffer (a
`StreamReplayBuffer`: each observation stored once) and takes `replay.updates_per_step`
gradient steps per env step (fractions carry over to the next iteration), each on a batch
the `DataMixer` draws from the online buffer and, when `replay.offline` is set, an offline
dataset.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import gymnasium.spaces as spaces
import torch
from tensordict import TensorDict

from rlcore.algos.base import Algorithm
from rlcore.config import ExperimentConfig
from rlcore.datasets import check_dataset_fits, load_dataset
from rlcore.envs.base import BatchedEnv
from rlcore.errors import NonFiniteError
from rlcore.mixer import DataMixer
from rlcore.policies import UniformRandomPolicy
from rlcore.stream_replay import StreamReplayBuffer

log = logging.getLogger(__name__)

SAVE_LIMIT_BYTES = 1 << 30  # buffers under 1 GB go into checkpoints unless told otherwise


class OffPolicyLearner:
    """Owns the replay buffer (and offline dataset) of an off-policy run, and its schedule."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        env: BatchedEnv,
        algo: Algorithm,
        generator: torch.Generator,
    ) -> None:
        rc = cfg.replay
        self.cfg, self.algo = rc, algo
        # Offline only, an iteration takes the gradient steps that as many env steps would
        # earn: `trainer.total_env_steps x updates_per_step` in all.
        self._steps_per_iter = cfg.steps_per_iter
        offline = None
        if rc.offline is not None:  # checked against the env before anything is allocated
            action_shape = (
                () if isinstance(env.action_space, spaces.Discrete) else (env.action_dim,)
            )
            action_dtype = torch.int64 if not action_shape else torch.float32
            check_dataset_fits(rc.offline.path, env.obs_spec, action_shape, action_dtype)
            offline = load_dataset(rc.offline.path, env.device, generator)
        fraction = 0.0 if rc.offline is None else rc.offline.fraction
        self.offline_only = fraction == 1.0
        capacity = 1 if self.offline_only else rc.capacity
        self.buffer = StreamReplayBuffer.for_env(env, capacity, generator)
        self.mixer = DataMixer(self.buffer, offline, fraction)
        self.save_buffer = (
            rc.save_in_checkpoint
            if rc.save_in_checkpoint is not None
            else self.buffer.nominal_bytes < SAVE_LIMIT_BYTES
        )
        if not self.save_buffer and not self.offline_only:
            log.warning(
                "the replay buffer (%.1f GB) is not saved in checkpoints "
                "(replay.save_in_checkpoint): a resumed run starts with an empty buffer and "
                "is not bit-identical to an uninterrupted one",
                self.buffer.nominal_bytes / 1e9,
            )
        collected = cfg.total_iters * cfg.steps_per_iter
        if not self.offline_only and rc.warmup_steps > collected:
            log.warning(
                "replay.warmup_steps (%s) is more than the %s env steps this run collects "
                "(trainer.total_env_steps): it acts at random throughout and takes no "
                "gradient step",
                f"{rc.warmup_steps:,d}",
                f"{collected:,d}",
            )
        self._random = (
            UniformRandomPolicy(env.action_space).to(env.device)
            if isinstance(env.action_space, spaces.Box)
            else None
        )
        self.env_steps = 0  # collected into the buffer so far
        self.updates = 0  # gradient steps taken so far
        self._owed = 0.0  # gradient steps earned but not yet taken (fractional ratios)

    def warmup_policy(self) -> UniformRandomPolicy | None:
        """The policy to act with now: uniform random actions during warm-up, else None
        (the trained policy)."""
        return self._random if self.env_steps < self.cfg.warmup_steps else None

    def learn(self, rollout: TensorDict | None) -> dict[str, float]:
        """Store a collected rollout (None: offline only) and take the gradient steps owed."""
        steps = self._steps_per_iter
        if rollout is not None:
            self.buffer.add_rollout(rollout)
            self.env_steps += steps
        if self.env_steps < self.cfg.warmup_steps and not self.offline_only:
            return {"train/replay_size": float(len(self.buffer))}
        self._owed += self.cfg.updates_per_step * steps
        count = int(self._owed)
        self._owed -= count
        sums: torch.Tensor | None = None
        for _ in range(count):
            stats = self.algo.update(self.mixer.sample(self.cfg.batch_size))
            sums = stats if sums is None else sums.add_(stats)
        self.updates += count
        metrics = {"train/replay_size": float(len(self.buffer)), "train/updates": float(count)}
        if sums is None:
            return metrics
        means = (sums / count).tolist()
        named = dict(zip(self.algo.metric_names, means, strict=True))
        if not all(map(math.isfinite, means)):
            raise NonFiniteError(
                f"off-policy losses became non-finite ({named}); training stopped and the "
                "last checkpoint was left as it was"
            )
        return metrics | named

    def state_dict(self) -> dict[str, Any]:
        """Step and update counts, the fractional updates owed, and the buffer's contents
        when `save_buffer` (small enough, or `replay.save_in_checkpoint`)."""
        state: dict[str, Any] = {
            "env_steps": self.env_steps,
            "updates": self.updates,
            "owed": self._owed,
        }
        if self.save_buffer:
            state["buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counts and, if saved, the buffer; without it the run goes on with an
        empty buffer (and says so)."""
        self.env_steps, self.updates = int(state["env_steps"]), int(state["updates"])
        self._owed = float(state["owed"])
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])
        else:
            log.warning("resuming without the replay buffer's contents (not in the checkpoint)")
