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
from rlcore.algos.log_probs import write_log_probs
from rlcore.algos.losses import (
    approx_kl,
    clip_fraction,
    clipped_surrogate,
    raise_if_non_finite,
)
from rlcore.algos.minibatch import Minibatch, epoch_minibatches, minibatch_rows
from rlcore.algos.sgd import PolicyOptimizer, resolve_microbatch_size
from rlcore.algos.whole_step import WholeStep
from rlcore.distributed import Distributed
from rlcore.policies import ActorCritic, actor_critic_policy
from rlcore.precision import trains_bf16, update_autocast
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
STAT_NAMES = (
    "loss/policy", "loss/value", "loss/entropy", "stats/approx_kl", "stats/clip_fraction",
    "loss/aux",
)  # fmt: skip
"""The loss's statistics vector, by position (`PPO._loss_terms`)."""


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
        """PPO for one run, on the compiled whole-step path where the run allows it."""
        assert isinstance(ctx.policy, ActorCritic)
        # An env with invalid steps (Gymnasium's next-step reset) varies the minibatch sizes
        # from update to update, so its steps are not captured as CUDA graphs (one per size).
        whole_step = ctx.compile_loss and ctx.cfg.takes_whole_steps(ctx.dist.world_size)
        return cls(
            ctx.policy, ctx.cfg, ctx.total_updates, ctx.generator, ctx.dist,
            ctx.compile_loss and not whole_step, whole_step,
            graphs=not ctx.env.has_invalid_steps,
        )  # fmt: skip

    def __init__(
        self,
        policy: ActorCritic,
        cfg: PPOConfig,
        total_updates: int,
        generator: torch.Generator,
        dist: Distributed | None = None,
        compile_loss: bool = False,
        whole_step: bool = False,
        graphs: bool = True,
    ) -> None:
        self.policy, self.cfg, self.generator = policy, cfg, generator
        self._device = policy.network_device
        self._bf16 = trains_bf16(cfg.precision, self._device)
        self.dist = dist or Distributed()
        self.optimizer = PolicyOptimizer(
            policy, cfg.lr, cfg.adam_eps, cfg.lr_schedule, total_updates, dist
        )
        self.whole_step: WholeStep | None = None
        if whole_step:
            self.whole_step = WholeStep(
                self._loss_terms, self.optimizer.use_device_adam(), self.optimizer.grads,
                num_stats=len(STAT_NAMES), normalize_advantage=cfg.normalize_advantage,
                max_grad_norm=cfg.max_grad_norm, target_kl=cfg.target_kl,
                kl_index=STAT_NAMES.index("stats/approx_kl"), graphs=graphs,
                module=policy,
            )  # fmt: skip
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

    def update(self, rollout: TensorDict) -> dict[str, float] | dict[str, torch.Tensor]:
        """Compute GAE in place, then run clipped-surrogate epochs over shuffled minibatches.

        Returns the update's metrics as floats, or, on the whole-step path, as 0-d device
        tensors (read by the trainer when it next reads the device).
        """
        cfg = self.cfg
        with torch.no_grad():
            self._write_advantages(rollout)
        if self._bf16:
            # The ratio's denominator in the loss's own precision: the collector acted in
            # float32, and bf16's rounding of the hidden features, measured against a
            # float32 log-probability, is noise in every ratio that grows as the policy's
            # std shrinks. Re-evaluated (as LLM trainers recompute the sampler's
            # log-probabilities), every ratio starts at 1.
            with update_autocast(True, self._device):
                write_log_probs(self.policy, rollout, SAMPLE_LOG_PROB)
        self.optimizer.begin_update()
        if self.whole_step is not None:
            return self._update_whole_step(rollout)
        tv = transition_view(rollout)
        # An env's invalid steps (see rlcore.envs.base) are no transitions: never in the loss.
        valid = tv.get(MASK, None)
        chunk = self.microbatch_size(rollout)
        num_minibatches = self.dist.common_minibatch_count(cfg.num_minibatches, valid)
        sums = torch.zeros(len(STAT_NAMES), device=tv.device)
        num_batches, stop = 0, False
        kl_index = STAT_NAMES.index("stats/approx_kl")
        epochs = epoch_minibatches(
            tv, _BATCH_KEYS, num_minibatches, cfg.num_epochs, self.generator,
            where=valid, prepare=self._normalize_advantage,
        )  # fmt: skip
        for batches in epochs:
            for batch in batches:
                stats = self._step(batch, chunk)
                sums += stats
                num_batches += 1
                if cfg.target_kl is not None and stats[kl_index].item() > 1.5 * cfg.target_kl:
                    stop = True
                    break
            if stop:
                break
        means = dict(zip(STAT_NAMES, (sums / max(num_batches, 1)).tolist(), strict=True))
        self.optimizer.end_update()
        if cfg.lr_schedule == "kl_adaptive":
            self._adapt_lr(means["stats/approx_kl"])
        if self.policy.aux_head is None:
            del means["loss/aux"]
        return (
            means
            | {
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

    def _update_whole_step(self, rollout: TensorDict) -> dict[str, torch.Tensor]:
        """`update`'s epochs on the compiled whole-step path: the same minibatches from
        the same random draws, no host reads (but one where the env has invalid steps:
        Gymnasium's next-step reset; such an env is on the host anyway)."""
        cfg, steps = self.cfg, self.whole_step
        assert steps is not None
        tv = transition_view(rollout)
        valid = tv.get(MASK, None)
        steps.run_epochs(rollout, valid, cfg.num_epochs, cfg.num_minibatches, self.generator)
        self.optimizer.end_update()
        means = steps.sums / steps.count.clamp(min=1.0)
        adam = self.optimizer.device_adam
        assert adam is not None
        if cfg.lr_schedule == "kl_adaptive":
            adapt_lr_on_device(adam.lr, means[STAT_NAMES.index("stats/approx_kl")], cfg.desired_kl)
        metrics = dict(zip(STAT_NAMES, means.unbind(), strict=True))
        if self.policy.aux_head is None:
            del metrics["loss/aux"]
        metrics |= {
            "stats/explained_variance": explained_variance_tensor(
                tv[VALUE] if valid is None else tv[VALUE][valid],
                tv[VALUE_TARGET] if valid is None else tv[VALUE_TARGET][valid],
            ),
            "train/lr": adam.lr.clone(),
            "train/minibatches": steps.count.clone(),
        }
        if self.return_norm is not None:
            metrics["stats/return_std"] = torch.tensor(self.return_norm.return_std)
        return metrics

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
        shown = {"policy": STAT_NAMES.index("loss/policy"), "value": STAT_NAMES.index("loss/value")}
        raise_if_non_finite("PPO", loss, stats, shown)
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
        with update_autocast(self._bf16, self._device):
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
        """The optimizer's state, and the return normalizer's shared statistics if any."""
        state = self.optimizer.state_dict()
        if self.return_norm is not None:
            state["return_norm"] = self.return_norm.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the optimizer and the return normalizer from `state_dict`."""
        self.optimizer.load_state_dict(state)
        if self.return_norm is not None:
            self.return_norm.load_state_dict(state["return_norm"])

    def rank_state_dict(self) -> dict[str, Any]:
        """Per-rank state: each env's running return (with `normalize_reward`)."""
        return {} if self.return_norm is None else self.return_norm.rank_state_dict()

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        """Restore this rank's running returns (with `normalize_reward`)."""
        if self.return_norm is not None:
            self.return_norm.load_rank_state_dict(state)


def explained_variance_tensor(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """`explained_variance` as a 0-d tensor on the inputs' device (no host read)."""
    var_target = target.var()
    ratio = (target - prediction).var() / var_target
    return torch.where(var_target == 0, torch.full_like(ratio, float("nan")), 1.0 - ratio)


def adapt_lr_on_device(lr: torch.Tensor, kl: torch.Tensor, desired_kl: float) -> None:
    """`PPO._adapt_lr`'s rule on a device rate tensor, in place."""
    lower = torch.clamp(lr / 1.5, min=1e-5)
    higher = torch.clamp(lr * 1.5, max=1e-2)
    new = torch.where(kl > 2.0 * desired_kl, lower, torch.where(kl < 0.5 * desired_kl, higher, lr))
    lr.copy_(new)


def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - prediction) / Var(target); NaN when the target is constant."""
    var_target = target.var()
    if var_target == 0:
        return float("nan")
    return (1.0 - (target - prediction).var() / var_target).item()
