"""Proximal Policy Optimization (Schulman et al., 2017) with GAE advantages.

Reads from `transition_view(rollout)`: `obs`, `action`, `sample_log_prob`, `value`,
`final_value`, `reward`, `terminated`, `truncated`; and `rollout["value"][:, T]` through the
advantage estimator. Writes `advantage` and `value_target` in place (no rollout copies).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from rlcore.advantages import compute_gae
from rlcore.algos.base import AlgorithmContext
from rlcore.algos.compile import maybe_compile
from rlcore.algos.config import PPOConfig
from rlcore.algos.losses import (
    approx_kl,
    clip_fraction,
    clipped_surrogate,
    raise_if_non_finite,
)
from rlcore.algos.minibatch import Minibatch, epoch_minibatches, minibatch_rows
from rlcore.algos.sgd import PolicyOptimizer, resolve_microbatch_size
from rlcore.distributed import Distributed
from rlcore.policies import ActorCritic, actor_critic_policy
from rlcore.return_norm import ReturnNormalizer
from rlcore.rollout import (
    ACTION,
    ADVANTAGE,
    FINAL_VALUE,
    MASK,
    OBS,
    REWARD,
    SAMPLE_LOG_PROB,
    TERMINATED,
    TRUNCATED,
    VALUE,
    VALUE_TARGET,
    transition_view,
)

_BATCH_KEYS = (OBS, ACTION, SAMPLE_LOG_PROB, VALUE, ADVANTAGE, VALUE_TARGET)


def value_loss(
    value: torch.Tensor, old_value: torch.Tensor, target: torch.Tensor, clip_eps: float | None
) -> torch.Tensor:
    """Half mean squared error, optionally with PPO2-style value clipping."""
    error = (value - target).square()
    if clip_eps is not None:
        clipped = old_value + (value - old_value).clamp(-clip_eps, clip_eps)
        error = torch.maximum(error, (clipped - target).square())
    return 0.5 * error.mean()


class PPO:
    """PPO-clip over the shared rollout; see module docstring for the keys it touches."""

    off_policy: ClassVar[bool] = False
    same_step_reset: ClassVar[bool] = False
    groups = None

    make_policy = staticmethod(actor_critic_policy)

    @classmethod
    def build(cls, ctx: AlgorithmContext) -> PPO:
        assert isinstance(ctx.policy, ActorCritic)
        return cls(
            ctx.policy, ctx.cfg, ctx.total_updates, ctx.generator, ctx.dist, ctx.compile_loss
        )

    def __init__(
        self,
        policy: ActorCritic,
        cfg: PPOConfig,
        total_updates: int,
        generator: torch.Generator,
        dist: Distributed | None = None,
        compile_loss: bool = False,
    ) -> None:
        self.policy, self.cfg, self.generator = policy, cfg, generator
        self.dist = dist or Distributed()
        self.optimizer = PolicyOptimizer(
            policy, cfg.lr, cfg.adam_eps, cfg.lr_schedule, total_updates, dist
        )
        self._loss_terms = maybe_compile(self._loss_terms, compile_loss)
        self.return_norm = ReturnNormalizer(cfg.gamma) if cfg.normalize_reward else None

    def microbatch_size(self, rollout: TensorDict) -> int | None:
        """Samples per forward/backward chunk (see `rlcore.algos.sgd.resolve_microbatch_size`)."""
        return resolve_microbatch_size(self.cfg.microbatch_size, rollout, self.policy)

    def _write_advantages(self, rollout: TensorDict) -> None:
        cfg, tv = self.cfg, transition_view(rollout)
        reward = tv[REWARD]
        if self.return_norm is not None:
            reward = self.return_norm.normalize(reward, tv[TERMINATED] | tv[TRUNCATED], self.dist)
        if cfg.reward_scale != 1.0:
            reward = reward * cfg.reward_scale
        compute_gae(
            reward, rollout[VALUE], tv[FINAL_VALUE], tv[TERMINATED], tv[TRUNCATED],
            cfg.gamma, cfg.gae_lambda, advantage_out=tv[ADVANTAGE],
        )  # fmt: skip
        torch.add(tv[ADVANTAGE], tv[VALUE], out=tv[VALUE_TARGET])

    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Compute GAE in place, then run clipped-surrogate epochs over shuffled minibatches."""
        cfg = self.cfg
        with torch.no_grad():
            self._write_advantages(rollout)
        self.optimizer.begin_update()
        tv = transition_view(rollout)
        # An env's invalid steps (see rlcore.envs.base) are no transitions: never in the loss.
        valid = tv.get(MASK, None)
        chunk = self.microbatch_size(rollout)
        num_minibatches = self.dist.common_minibatch_count(cfg.num_minibatches, valid)
        sums = torch.zeros(6, device=tv.device)
        num_batches, stop = 0, False
        epochs = epoch_minibatches(
            tv, _BATCH_KEYS, num_minibatches, cfg.num_epochs, self.generator,
            where=valid, prepare=self._normalize_advantage,
        )  # fmt: skip
        for batches in epochs:
            for batch in batches:
                # stats: [policy, value, entropy, approx_kl, clip_fraction, aux]
                stats = self._step(batch, chunk)
                sums += stats
                num_batches += 1
                if cfg.target_kl is not None and stats[3].item() > 1.5 * cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        means = (sums / max(num_batches, 1)).tolist()
        self.optimizer.end_update()
        if cfg.lr_schedule == "kl_adaptive":
            self._adapt_lr(means[3])
        aux = {"loss/aux": means[5]} if self.policy.aux_head is not None else {}
        return (
            aux
            | {
                "loss/policy": means[0],
                "loss/value": means[1],
                "loss/entropy": means[2],
                "stats/approx_kl": means[3],
                "stats/clip_fraction": means[4],
                "stats/explained_variance": explained_variance(
                    tv[VALUE] if valid is None else tv[VALUE][valid],
                    tv[VALUE_TARGET] if valid is None else tv[VALUE_TARGET][valid],
                ),
                "train/lr": self.optimizer.lr,
                "train/minibatches": float(num_batches),
            }
            | (
                {"stats/return_std": self.return_norm.return_std}
                if self.return_norm is not None
                else {}
            )
        )

    def _normalize_advantage(self, batch: Minibatch) -> Minibatch:
        """The minibatch with its advantages normalised over it (where configured)."""
        advantage = batch[ADVANTAGE]
        if not self.cfg.normalize_advantage or advantage.shape[0] < 2:
            return batch
        return batch | {ADVANTAGE: (advantage - advantage.mean()) / (advantage.std() + 1e-8)}

    def _step(self, batch: Minibatch, chunk: int | None) -> torch.Tensor:
        """One optimizer step on a (prepared) minibatch."""
        size = batch[ADVANTAGE].shape[0]
        loss_fn = lambda rows: self._loss(minibatch_rows(batch, rows))  # noqa: E731
        return self.optimizer.step(size, chunk, loss_fn, self.cfg.max_grad_norm)

    def _loss(self, batch: Minibatch) -> tuple[torch.Tensor, torch.Tensor]:
        loss, stats = self._loss_terms(
            batch[OBS], batch[ACTION], batch[SAMPLE_LOG_PROB], batch[VALUE], batch[VALUE_TARGET],
            batch[ADVANTAGE],
        )  # fmt: skip
        raise_if_non_finite("PPO", loss, stats, {"policy": 0, "value": 1})
        return loss, stats

    def _loss_terms(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        old_log_prob: torch.Tensor,
        old_value: torch.Tensor,
        value_target: torch.Tensor,
        advantage: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss and its stats from tensors alone (what `compile_loss` compiles)."""
        cfg = self.cfg
        out = self.policy.evaluate(obs, action)
        pg_loss, ratio = clipped_surrogate(out.log_prob, old_log_prob, advantage, cfg.clip_eps)
        v_loss = value_loss(out.value, old_value, value_target, cfg.clip_value_eps)
        entropy = out.entropy.mean()
        loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
        aux = out.aux_loss if out.aux_loss is not None else torch.zeros_like(pg_loss)
        if out.aux_loss is not None:
            loss = loss + self.policy.aux_coef * aux
        with torch.no_grad():
            clip_frac = clip_fraction(ratio, cfg.clip_eps)
            stats = torch.stack([pg_loss, v_loss, entropy, approx_kl(ratio), clip_frac, aux])
        return loss, stats.detach()

    def _adapt_lr(self, kl: float) -> None:
        # rsl_rl's rule: shrink the step when the policy moved too far, grow it when too little.
        lr = self.optimizer.lr
        if kl > 2.0 * self.cfg.desired_kl:
            self.optimizer.set_lr(max(lr / 1.5, 1e-5))
        elif kl < 0.5 * self.cfg.desired_kl:
            self.optimizer.set_lr(min(lr * 1.5, 1e-2))

    def state_dict(self) -> dict[str, Any]:
        state = self.optimizer.state_dict()
        if self.return_norm is not None:
            state["return_norm"] = self.return_norm.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)
        if self.return_norm is not None:
            self.return_norm.load_state_dict(state["return_norm"])

    def rank_state_dict(self) -> dict[str, Any]:
        """Per-rank state: each env's running return (with `normalize_reward`)."""
        return {} if self.return_norm is None else self.return_norm.rank_state_dict()

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        if self.return_norm is not None:
            self.return_norm.load_rank_state_dict(state)


def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - prediction) / Var(target); NaN when the target is constant."""
    var_target = target.var()
    if var_target == 0:
        return float("nan")
    return (1.0 - (target - prediction).var() / var_target).item()
