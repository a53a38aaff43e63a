"""SyncCollector: fills the shared rollout by stepping a batched env with a policy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv
from rlcore.policies import Actor
from rlcore.rollout import (
    ACTION,
    DONE,
    FINAL_VALUE,
    OBS,
    SAMPLE_LOG_PROB,
    SUCCESS,
    VALUE,
    num_steps,
    step_slots,
)


@dataclass(frozen=True)
class EpisodeStats:
    """Episodes that finished during one rollout.

    Shape:
        returns, lengths: [E] for E finished episodes; successes: [E] bool or None
    """

    returns: torch.Tensor
    lengths: torch.Tensor
    successes: torch.Tensor | None

    def metrics(self, prefix: str = "train") -> dict[str, float]:
        """Means over the finished episodes (empty dict if none finished)."""
        if self.returns.numel() == 0:
            return {}
        out = {
            f"{prefix}/episode_return": self.returns.mean().item(),
            f"{prefix}/episode_length": self.lengths.double().mean().item(),
            f"{prefix}/episodes": float(self.returns.numel()),
        }
        if self.successes is not None:
            out[f"{prefix}/success_rate"] = self.successes.double().mean().item()
        return out


@dataclass(frozen=True)
class _PolicyViews:
    """Views of the rollout at step t that the policy's outputs are copied into."""

    obs: torch.Tensor
    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor  # empty placeholders in a critic-free rollout
    final_value: torch.Tensor

    @staticmethod
    def at(rollout: TensorDict, t: int) -> _PolicyViews:
        none = torch.empty(0)
        return _PolicyViews(
            obs=rollout[OBS][:, t],
            action=rollout[ACTION][:, t],
            log_prob=rollout[SAMPLE_LOG_PROB][:, t],
            value=rollout[VALUE][:, t] if VALUE in rollout else none,
            final_value=rollout[FINAL_VALUE][:, t] if VALUE in rollout else none,
        )


class SyncCollector:
    """Steps `env` with `policy` for T steps per call, writing straight into `rollout`.

    The policy writes `action`, `sample_log_prob` (and `value`, `final_value` if it has a
    critic); the env writes its own step fields into the same storage via `StepSlot` views.
    `final_value[:, t]` is V(true final obs) for transitions truncated (and not terminated)
    at t, and 0 elsewhere; `value[:, T]` is the bootstrap value of the last observation.
    """

    def __init__(
        self,
        env: BatchedEnv,
        policy: Actor,
        rollout: TensorDict,
        generator: torch.Generator,
    ) -> None:
        if policy.obs_dim != env.obs_dim:
            raise ValueError(
                f"policy observation dim {policy.obs_dim} does not match env obs_dim {env.obs_dim}"
            )
        if policy.action_dim != env.action_dim:
            raise ValueError(
                f"policy action dim {policy.action_dim} does not match env action_dim "
                f"{env.action_dim} ({env.action_space})"
            )
        self._with_value = VALUE in rollout
        if self._with_value != policy.has_critic:
            raise ValueError(
                "the rollout must hold `value` exactly when the policy has a critic "
                f"(rollout: {self._with_value}, policy: {policy.has_critic})"
            )
        self.env, self.policy, self.rollout, self.generator = env, policy, rollout, generator
        self._slots = step_slots(rollout)
        self._obs_at_end = False
        self._policy_views = [_PolicyViews.at(rollout, t) for t in range(num_steps(rollout))]
        n, horizon, dev = env.num_envs, num_steps(rollout), env.device
        # Running return and length of the current episodes, and their value at every step
        # (read where `done`), time-major: [2, N] and [T, 2, N] (float32 counts are exact
        # up to 2^24 steps; half the memory traffic of float64 on every step).
        self._running = torch.zeros(2, n, device=dev)
        self._running_at = torch.zeros(horizon, 2, n, device=dev)
        self._one = torch.ones((), device=dev)

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (seeded) and start fresh episodes."""
        self.rollout[OBS][:, 0] = self.env.reset(seed=seed)
        self._obs_at_end = False
        self._running.zero_()

    @torch.inference_mode()
    def collect(self) -> EpisodeStats:
        """Fill the rollout with T fresh transitions and return the episodes that ended."""
        ro, policy, env = self.rollout, self.policy, self.env
        obs = ro[OBS]
        if self._obs_at_end:
            obs[:, 0] = obs[:, -1]
        if self._with_value:
            ro[FINAL_VALUE].zero_()
        for t, (slot, views) in enumerate(zip(self._slots, self._policy_views, strict=True)):
            out = policy.act(views.obs, self.generator)
            views.action.copy_(out.action)
            views.log_prob.copy_(out.log_prob)
            env.step(out.action, slot)
            self._track_episodes(t, slot.reward, slot.done)
            if self._with_value:
                views.value.copy_(out.value)
                # Only time-limit ends are bootstrapped; a rare event, so evaluate the critic
                # on the final observations only when one happened (a host check on CPU).
                if slot.truncated.any():
                    mask = slot.truncated & ~slot.terminated
                    v_final = policy.value(env.final_obs)
                    torch.where(mask, v_final, views.final_value, out=views.final_value)
        if self._with_value:
            ro[VALUE][:, -1] = policy.value(obs[:, -1])
        self._obs_at_end = True
        return self._finished_episodes()

    def _track_episodes(self, t: int, reward: torch.Tensor, done: torch.Tensor) -> None:
        # Row 0: running return, row 1: running length; one op updates or resets both.
        self._running[0].add_(reward)
        self._running[1].add_(self._one)
        self._running_at[t].copy_(self._running)
        self._running.masked_fill_(done, 0.0)

    def _finished_episodes(self) -> EpisodeStats:
        """Return, length (and success) of every episode that ended in this rollout."""
        done = self.rollout[DONE][:, :-1].T  # [T, N], contiguous in this layout
        success = self.rollout.get(SUCCESS, None)
        return EpisodeStats(
            returns=self._running_at[:, 0][done],
            lengths=self._running_at[:, 1][done].long(),
            successes=None if success is None else success[:, :-1].T[done],
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The current observation and the running episode sums (for exact resume)."""
        current = self.rollout[OBS][:, -1 if self._obs_at_end else 0]
        return {"obs": current.clone(), "episodes": self._running.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.rollout[OBS][:, 0] = state["obs"]
        self._obs_at_end = False
        self._running.copy_(state["episodes"])
