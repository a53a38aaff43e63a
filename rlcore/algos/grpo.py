"""Group Relative Policy Optimization for control: critic-free, group-normalised returns.

Each rollout is collected with grouped episodes (`rlcore.collector.GroupEpisodes`): the G
envs of a group start every episode from one shared state, and `mask` marks the transitions
of those group episodes. The advantage of a transition is its discounted return-to-go,
normalised at the same step over the group's unmasked members, so a member is credited for
doing better than its siblings did from the same start (Shao et al., 2024, adapted from
one-shot answers to step-wise returns).

Reads from `transition_view(rollout)`: `obs`, `action`, `sample_log_prob`, `reward`, `done`,
`mask`. Writes `advantage` and `ref_log_prob` in place (no rollout copies).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from rlcore.advantages import discounted_returns, group_normalize
from rlcore.algos.base import AlgorithmContext
from rlcore.algos.compile import maybe_compile
from rlcore.algos.config import GRPOConfig
from rlcore.algos.log_probs import write_log_probs
from rlcore.algos.losses import (
    approx_kl,
    clip_fraction,
    clipped_surrogate,
    k3_kl,
    raise_if_non_finite,
)
from rlcore.algos.minibatch import Minibatch, epoch_minibatches, minibatch_rows
from rlcore.algos.sgd import PolicyOptimizer, resolve_microbatch_size
from rlcore.algos.whole_step import WholeStep
from rlcore.collector import GroupEpisodes
from rlcore.distributed import Distributed
from rlcore.policies import Actor, actor_policy
from rlcore.precision import trains_bf16, update_autocast
from rlcore.rollout import (
    ACTION,
    ADVANTAGE,
    DONE,
    MASK,
    OBS,
    REF_LOG_PROB,
    REWARD,
    SAMPLE_LOG_PROB,
    transition_view,
)

_BATCH_KEYS = (OBS, ACTION, SAMPLE_LOG_PROB, ADVANTAGE, REF_LOG_PROB)
STAT_NAMES = (
    "loss/policy", "loss/entropy", "stats/approx_kl", "stats/clip_fraction",
    "stats/approx_ref_kl", "loss/aux",
)  # fmt: skip
"""The loss's statistics vector, by position (`GRPO._loss_terms`)."""


class GRPO:
    """GRPO-clip over the shared rollout; see module docstring for the keys it touches.

    The reference policy of the KL penalty is a frozen copy of the policy as it was when
    the algorithm was built (the pretrained policy when fine-tuning); `stats/approx_ref_kl`
    is reported whether or not `kl_coef` puts it into the loss.
    """

    off_policy: ClassVar[bool] = False
    same_step_reset: ClassVar[bool] = True  # grouped episodes need a transition every step
    groups: GroupEpisodes | None = None  # set by __init__: the collector's grouped episodes

    make_policy = staticmethod(actor_policy)

    @classmethod
    def build(cls, ctx: AlgorithmContext) -> GRPO:
        """GRPO for one run, from the trainer's shared pieces, on the compiled whole-step
        path where the run allows it."""
        whole_step = ctx.compile_loss and ctx.cfg.takes_whole_steps(ctx.dist.world_size)
        return cls(
            ctx.policy, ctx.cfg, ctx.total_updates, ctx.generator, ctx.dist,
            ctx.compile_loss and not whole_step, whole_step,
        )  # fmt: skip

    def __init__(
        self,
        policy: Actor,
        cfg: GRPOConfig,
        total_updates: int,
        generator: torch.Generator,
        dist: Distributed | None = None,
        compile_loss: bool = False,
        whole_step: bool = False,
    ) -> None:
        if policy.has_critic:
            raise ValueError(
                "grpo needs an actor-only policy (make_policy(..., with_critic=False)); "
                f"got {type(policy).__name__}, which has a critic"
            )
        self.policy, self.cfg, self.generator = policy, cfg, generator
        self._device = policy.network_device
        self._bf16 = trains_bf16(cfg.precision, self._device)
        self.dist = dist or Distributed()
        self.reference = copy.deepcopy(policy).requires_grad_(False)
        self.optimizer = PolicyOptimizer(
            policy, cfg.lr, cfg.adam_eps, cfg.lr_schedule, total_updates, dist
        )
        self.whole_step: WholeStep | None = None
        if whole_step:
            # The loss mask varies the minibatch sizes from update to update: no CUDA graphs
            # (one per size), and one host read of the mask per update.
            self.whole_step = WholeStep(
                self._loss_terms, self.optimizer.use_device_adam(), self.optimizer.grads,
                num_stats=len(STAT_NAMES), normalize_advantage=False,
                max_grad_norm=cfg.max_grad_norm, target_kl=None, kl_index=0, graphs=False,
                fields=(ACTION, SAMPLE_LOG_PROB, ADVANTAGE, REF_LOG_PROB),
                module=policy,
            )  # fmt: skip
        self._loss_terms = maybe_compile(self._loss_terms, compile_loss)
        self.groups = GroupEpisodes(
            cfg.group_size,
            restart_groups=cfg.episode_mode == "restart_groups",
            reset_every_rollout=cfg.reset_every_rollout,
        )

    def update(self, rollout: TensorDict) -> dict[str, float] | dict[str, torch.Tensor]:
        """Group-normalise returns in place, then run clipped-surrogate epochs on the mask.

        Returns the update's metrics as floats, or, on the whole-step path, as 0-d device
        tensors (read by the trainer when it next reads the device).
        """
        cfg = self.cfg
        if MASK not in rollout:
            raise ValueError("grpo needs a rollout with `mask` (RolloutSpec(with_mask=True))")
        tv = transition_view(rollout)
        with torch.no_grad():
            group_std = self._write_advantages(tv)
        # In the loss's precision: the reference, and under bf16 the behaviour policy (see PPO).
        with update_autocast(self._bf16, self._device):
            write_log_probs(self.reference, rollout, REF_LOG_PROB)
            if self._bf16:
                write_log_probs(self.policy, rollout, SAMPLE_LOG_PROB)
        self.optimizer.begin_update()
        if self.whole_step is not None:
            return self._update_whole_step(rollout, group_std)
        group_std = float(group_std)
        chunk = resolve_microbatch_size(cfg.microbatch_size, rollout, self.policy)
        num_minibatches = self.dist.common_minibatch_count(cfg.num_minibatches, tv[MASK])
        sums = torch.zeros(len(STAT_NAMES), device=tv.device)
        num_batches = 0
        epochs = epoch_minibatches(
            tv, _BATCH_KEYS, num_minibatches, cfg.num_epochs, self.generator, where=tv[MASK]
        )
        for batches in epochs:
            for batch in batches:
                size = batch[ADVANTAGE].shape[0]
                loss_fn = lambda rows, batch=batch: self._loss(minibatch_rows(batch, rows))  # noqa: E731
                sums += self.optimizer.step(size, chunk, loss_fn, cfg.max_grad_norm)
                num_batches += 1
        means = dict(zip(STAT_NAMES, (sums / max(num_batches, 1)).tolist(), strict=True))
        self.optimizer.end_update()
        if self.policy.aux_head is None:
            del means["loss/aux"]
        return means | {
            "stats/group_return_std": group_std,
            "stats/loss_fraction": tv[MASK].float().mean().item(),
            "train/lr": self.optimizer.lr,
            "train/minibatches": float(num_batches),
        }

    def _update_whole_step(
        self, rollout: TensorDict, group_std: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """`update`'s epochs as compiled whole steps: the same minibatches from the same
        draws over the loss mask (`rlcore.algos.whole_step`)."""
        cfg, steps, mask = self.cfg, self.whole_step, transition_view(rollout)[MASK]
        assert steps is not None
        num_minibatches = self.dist.common_minibatch_count(cfg.num_minibatches, mask)
        steps.run_epochs(rollout, mask, cfg.num_epochs, num_minibatches, self.generator)
        self.optimizer.end_update()
        adam = self.optimizer.device_adam
        assert adam is not None
        means = steps.sums / steps.count.clamp(min=1.0)
        metrics = dict(zip(STAT_NAMES, means.unbind(), strict=True))
        if self.policy.aux_head is None:
            del metrics["loss/aux"]
        return metrics | {
            "stats/group_return_std": group_std,
            "stats/loss_fraction": mask.float().mean(),
            "train/lr": adam.lr.clone(),
            "train/minibatches": steps.count.clone(),
        }

    def _write_advantages(self, tv: TensorDict) -> torch.Tensor:
        cfg = self.cfg
        reward = tv[REWARD] if cfg.reward_scale == 1.0 else tv[REWARD] * cfg.reward_scale
        discounted_returns(reward, tv[DONE], cfg.gamma, returns_out=tv[ADVANTAGE])
        return group_normalize(
            tv[ADVANTAGE], tv[MASK], cfg.group_size, cfg.eps, advantage_out=tv[ADVANTAGE]
        )

    def _loss(self, batch: Minibatch) -> tuple[torch.Tensor, torch.Tensor]:
        loss, stats = self._loss_terms(
            batch[OBS], batch[ACTION], batch[SAMPLE_LOG_PROB], batch[ADVANTAGE],
            batch[REF_LOG_PROB],
        )  # fmt: skip
        shown = {
            "policy": STAT_NAMES.index("loss/policy"),
            "ref_kl": STAT_NAMES.index("stats/approx_ref_kl"),
        }
        raise_if_non_finite("GRPO", loss, stats, shown)
        return loss, stats

    def _loss_terms(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        old_log_prob: torch.Tensor,
        advantage: torch.Tensor,
        ref_log_prob: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss and its stats from tensors alone (what `compile_loss` compiles)."""
        cfg = self.cfg
        with update_autocast(self._bf16, self._device):
            out = self.policy.evaluate(obs, action)
        pg_loss, ratio = clipped_surrogate(out.log_prob, old_log_prob, advantage, cfg.clip_eps)
        entropy = out.entropy.mean()
        ref_kl = k3_kl(out.log_prob, ref_log_prob)
        loss = pg_loss - cfg.ent_coef * entropy
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * ref_kl
        aux = out.aux_loss if out.aux_loss is not None else torch.zeros_like(pg_loss)
        if out.aux_loss is not None:
            loss = loss + self.policy.aux_coef * aux
        with torch.no_grad():
            clip_frac = clip_fraction(ratio, cfg.clip_eps)
            stats = torch.stack([pg_loss, entropy, approx_kl(ratio), clip_frac, ref_kl, aux])
        return loss, stats.detach()

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state and the KL penalty's frozen reference policy."""
        return self.optimizer.state_dict() | {"reference": self.reference.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the optimizer and the reference policy from `state_dict`."""
        self.optimizer.load_state_dict(state)
        self.reference.load_state_dict(state["reference"])

    def rank_state_dict(self) -> dict[str, Any]:
        """Nothing differs between ranks but what the trainer saves itself."""
        return {}

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: `rank_state_dict` is empty."""
