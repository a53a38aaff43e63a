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
    REWARD,
    SAMPLE_LOG_PROB,
    SUCCESS,
    TRUNCATED,
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
        self.env, self.policy, self.rollout, self.generator = env, policy, rollout, generator
        self._slots = step_slots(rollout)
        self._obs_at_end = False
        self._with_value = policy.has_critic
        n = env.num_envs
        self._episode_return = torch.zeros(n, dtype=torch.float64, device=env.device)
        self._episode_length = torch.zeros(n, dtype=torch.int64, device=env.device)

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (seeded) and start fresh episodes."""
        self.rollout[OBS][:, 0] = self.env.reset(seed=seed)
        self._obs_at_end = False
        self._episode_return.zero_()
        self._episode_length.zero_()

    @torch.inference_mode()
    def collect(self) -> EpisodeStats:
        """Fill the rollout with T fresh transitions and return the episodes that ended."""
        ro, policy, env = self.rollout, self.policy, self.env
        obs, action, log_prob = ro[OBS], ro[ACTION], ro[SAMPLE_LOG_PROB]
        if self._obs_at_end:
            obs[:, 0] = obs[:, -1]
        if self._with_value:
            value, final_value, _truncated = ro[VALUE], ro[FINAL_VALUE], ro[TRUNCATED]
            final_value.zero_()
        for t, slot in enumerate(self._slots):
            out = policy.act(obs[:, t], self.generator)
            action[:, t] = out.action
            log_prob[:, t] = out.log_prob
            env.step(out.action, slot)
            if self._with_value:
                value[:, t] = out.value
                # Only time-limit ends are bootstrapped; a rare event, so evaluate the critic
                # on the final observations only when one happened (a host check on CPU).
                if slot.truncated.any():
                    mask = slot.truncated & ~slot.terminated
                    v_final = policy.value(env.final_obs)
                    torch.where(mask, v_final, final_value[:, t], out=final_value[:, t])
        if self._with_value:
            value[:, -1] = policy.value(obs[:, -1])
        self._obs_at_end = True
        return self._finished_episodes()

    def _finished_episodes(self) -> EpisodeStats:
        """Per-episode return/length/success, vectorised over the whole rollout.

        Running sums are carried across rollouts; within one, an episode's return is the
        cumulative reward at its end minus the cumulative reward at the env's previous end.
        """
        ro = self.rollout
        horizon = num_steps(ro)
        reward, done = ro[REWARD][:, :horizon], ro[DONE][:, :horizon]
        cum_return = reward.double().cumsum(1) + self._episode_return[:, None]
        steps = torch.arange(1, horizon + 1, device=reward.device)
        cum_length = steps[None, :] + self._episode_length[:, None]
        env_idx, step_idx = done.nonzero(as_tuple=True)
        end_return, end_length = cum_return[env_idx, step_idx], cum_length[env_idx, step_idx]
        same_env = env_idx[1:] == env_idx[:-1]
        prev_return = torch.zeros_like(end_return)
        prev_length = torch.zeros_like(end_length)
        prev_return[1:] = torch.where(same_env, end_return[:-1], 0.0)
        prev_length[1:] = torch.where(same_env, end_length[:-1], 0)
        last_end = torch.full_like(self._episode_length, -1)
        last_end.scatter_reduce_(0, env_idx, step_idx, reduce="amax")
        ended = last_end >= 0
        at_last_end = last_end.clamp(min=0)[:, None]
        self._episode_return = cum_return[:, -1] - torch.where(
            ended, cum_return.gather(1, at_last_end).squeeze(1), 0.0
        )
        self._episode_length = cum_length[:, -1] - torch.where(
            ended, cum_length.gather(1, at_last_end).squeeze(1), 0
        )
        success = ro.get(SUCCESS, None)
        return EpisodeStats(
            returns=end_return - prev_return,
            lengths=end_length - prev_length,
            successes=None if success is None else success[env_idx, step_idx],
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The current observation and the running episode sums (for exact resume)."""
        current = self.rollout[OBS][:, -1 if self._obs_at_end else 0]
        return {
            "obs": current.clone(),
            "episode_return": self._episode_return.clone(),
            "episode_length": self._episode_length.clone(),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.rollout[OBS][:, 0] = state["obs"]
        self._obs_at_end = False
        self._episode_return = state["episode_return"].clone()
        self._episode_length = state["episode_length"].clone()
