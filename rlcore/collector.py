"""SyncCollector: fills the shared rollout by stepping a batched env with a policy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict

from rlcore.collection_graph import CollectionGraph, graph_refusal
from rlcore.compiled_act import CompiledAct
from rlcore.envs.base import BatchedEnv
from rlcore.episodes import EpisodeLists, EpisodeStats, episode_segments, episode_totals
from rlcore.observations import as_observation, describe
from rlcore.policies import Actor
from rlcore.rollout import (
    ACTION,
    DONE,
    FINAL_OBS,
    FINAL_VALUE,
    MASK,
    OBS,
    REWARD,
    SAMPLE_LOG_PROB,
    SUCCESS,
    VALUE,
    num_steps,
    step_slots,
)


@dataclass(frozen=True)
class GroupEpisodes:
    """How a critic-free collector groups episodes for GRPO.

    Envs `[kG, (k+1)G)` form group k and are always reset together from one shared sampled
    state. A member's transitions are in the loss (`mask`) from its group's reset up to and
    including its own `done`; after that it is masked until the group resets again. With
    `restart_groups` that happens as soon as every member is done; without it, only at the
    next rollout (the seed's `truncate_at_first_done`), which then needs
    `reset_every_rollout`.
    """

    group_size: int
    restart_groups: bool = True
    reset_every_rollout: bool = True

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {self.group_size}")
        if not (self.restart_groups or self.reset_every_rollout):
            raise ValueError("first-episode-only collection needs reset_every_rollout")


@dataclass(frozen=True)
class _PolicyViews:
    """Views of the rollout at step t that the policy's outputs are copied into."""

    obs: TensorDict
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


def _check_parts(
    env: BatchedEnv, policy: Actor, rollout: TensorDict, groups: GroupEpisodes | None
) -> None:
    """Refuse a policy, rollout or grouping that does not fit the env, naming the mismatch."""
    policy_spec = getattr(policy, "obs_spec", None)
    if policy_spec is not None and dict(policy_spec) != dict(env.obs_spec):
        raise ValueError(
            f"the policy reads observations {describe(policy_spec)}; the env's are "
            f"{describe(env.obs_spec)}"
        )
    if policy.action_dim != env.action_dim:
        raise ValueError(
            f"policy action dim {policy.action_dim} does not match env action_dim "
            f"{env.action_dim} ({env.action_space})"
        )
    with_value = VALUE in rollout
    if with_value != policy.has_critic:
        raise ValueError(
            "the rollout must hold `value` exactly when the policy has a critic "
            f"(rollout: {with_value}, policy: {policy.has_critic})"
        )
    if groups is not None and env.has_invalid_steps:
        raise ValueError(
            f"grouped episodes need an env that resets instances within the step; "
            f"{type(env).__name__} has invalid steps (a Gymnasium env resets within the "
            f"step with vectorization 'sync' or 'async' and autoreset 'same-step')"
        )
    masked = groups is not None or env.has_invalid_steps
    if masked != (MASK in rollout):
        raise ValueError(
            "the rollout must hold `mask` exactly when episodes are grouped or the env "
            f"has invalid steps (rollout: {MASK in rollout}, needed: {masked})"
        )
    if groups is not None and env.num_envs % groups.group_size != 0:
        raise ValueError(
            f"group_size must divide the number of envs ({env.num_envs}), got {groups.group_size}"
        )


class SyncCollector:
    """Steps `env` with `policy` for T steps per call, writing straight into `rollout`.

    The policy writes `action`, `sample_log_prob` (and `value`, `final_value` if it has a
    critic); the env writes its own step fields into the same storage via `StepSlot` views.
    `final_value[:, t]` is V(true final obs) for transitions truncated (and not terminated)
    at t, and 0 elsewhere; `value[:, T]` is the bootstrap value of the last observation.
    With `groups` (GRPO) it also writes `mask` and resets groups together (`GroupEpisodes`).
    `host_checks` False: no step reads the device (for envs that live on an accelerator).
    `compile_act`: the collector's own policy acts through `torch.compile`d networks, with
    the same random draws (`rlcore.compiled_act`). `graph_steps` (CUDA, no host checks,
    no groups, eager act): the T steps of its own policy run as one CUDA graph from the
    second rollout on (`rlcore.collection_graph`); ValueError where they cannot.
    """

    def __init__(
        self,
        env: BatchedEnv,
        policy: Actor,
        rollout: TensorDict,
        generator: torch.Generator,
        groups: GroupEpisodes | None = None,
        host_checks: bool = True,
        compile_act: bool = False,
        graph_steps: bool = False,
    ) -> None:
        _check_parts(env, policy, rollout, groups)
        # `runtime.compile`: the policy's act and value calls compiled (`rlcore.compiled_act`);
        # other policies (SAC's squashed Gaussian) act eagerly.
        self._compiled = CompiledAct(policy) if compile_act and isinstance(policy, Actor) else None
        self._with_value = VALUE in rollout
        self.env, self.policy, self.rollout, self.generator = env, policy, rollout, generator
        self.groups = groups
        self.host_checks = host_checks
        self._slots = step_slots(rollout, with_valid=env.has_invalid_steps)
        self._obs_at_end = False
        self._policy_views = [_PolicyViews.at(rollout, t) for t in range(num_steps(rollout))]
        # Per step, (entry, rollout view) pairs where the env's true final observations go.
        self._final_views: list[list[tuple[str, torch.Tensor]]] | None = None
        if FINAL_OBS in rollout:
            finals = rollout[FINAL_OBS]
            self._final_views = [
                [(key, value[:, t]) for key, value in finals.items()]
                for t in range(num_steps(rollout))
            ]
        n, horizon, dev = env.num_envs, num_steps(rollout), env.device
        # Return and length of the episodes running when the rollout starts ([2, N]); episode
        # sums are taken once per rollout (`rlcore.episodes`), not step by step.
        self._running = torch.zeros(2, n, device=dev)
        # Grouped episodes cut short by a group restart, time-major [T, N]: they end there
        # for the sums but are never reported.
        self._cut = torch.zeros(horizon, n, dtype=torch.bool, device=dev)
        # Grouped episodes: members whose group episode ended and who wait for their group.
        self._waiting = torch.zeros(n, dtype=torch.bool, device=dev)
        self._collects = 0  # rollouts collected: an `EpisodeStats` reads only its own
        if groups is not None:
            self._group_offsets = torch.arange(groups.group_size, device=dev)
        self._graph: CollectionGraph | None = None
        if graph_steps:
            refusal = graph_refusal(env, host_checks, groups is not None)
            if refusal is None and compile_act:
                refusal = "the graph captures the eager act (compile_act is off the graph path)"
            if refusal is not None:
                raise ValueError(f"graph_steps: {refusal}")
            generators = {id(g): g for g in (generator, *(env.graph_generators() or ()))}
            self._graph = CollectionGraph(lambda: self._steps(policy), generators.values(), dev)

    @property
    def graphs_steps(self) -> bool:
        """Whether its own policy's steps run as a CUDA graph (`graph_steps`)."""
        return self._graph is not None

    @property
    def graph_captured(self) -> bool:
        """Whether that graph is captured (after the first `collect`)."""
        return self._graph is not None and self._graph.captured

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (seeded; by groups if grouped) and start fresh episodes."""
        group_size = 1 if self.groups is None else self.groups.group_size
        self.rollout[OBS][:, 0] = self.env.reset(seed=seed, group_size=group_size)
        self._obs_at_end = False
        self._running.zero_()
        self._waiting.zero_()

    @torch.inference_mode()
    def collect(self, policy: Actor | None = None) -> EpisodeStats:
        """Fill the rollout with T fresh transitions and return the episodes that ended.

        `policy` acts in place of the collector's own for this call (an off-policy warm-up's
        random actions); it must have no critic where the rollout has no `value`.
        """
        ro = self.rollout
        policy = self.policy if policy is None else policy
        calls: Actor | CompiledAct = policy
        if policy is self.policy and self._compiled is not None:
            calls = self._compiled
        obs, groups = ro[OBS], self.groups
        if groups is not None and groups.reset_every_rollout:
            self.reset()
        elif self._obs_at_end:
            obs[:, 0] = obs[:, -1]
        if self._with_value:
            ro[FINAL_VALUE].zero_()
        if groups is not None and groups.restart_groups:
            self._cut.zero_()
        if self._graph is not None and policy is self.policy:
            self._graph()
        else:
            self._steps(calls)
        self._obs_at_end = True
        return self._finished_episodes()

    def _steps(self, calls: Actor | CompiledAct) -> None:
        """The T steps: act, step the env into the rollout, bootstrap values; device work
        only where the collector has no host checks (what a CUDA graph may capture)."""
        env, groups, final_obs = self.env, self.groups, self._final_views
        for t, (slot, views) in enumerate(zip(self._slots, self._policy_views, strict=True)):
            out = calls.act(views.obs, self.generator)
            views.action.copy_(out.action)
            views.log_prob.copy_(out.log_prob)
            env.step(slot.action, slot)  # the rollout's copy: host-side envs view it
            if final_obs is not None:
                # Off-policy learners bootstrap truncated ends from the true final obs; rows
                # of instances that are not done are stale, as in `env.final_obs` (a copy
                # without a host check, so no sync on accelerators). `env.final_obs` is read
                # each step: an env may swap it for another TensorDict.
                finals = env.final_obs
                for key, view in final_obs[t]:
                    view.copy_(finals[key])
            if groups is not None:
                self._group_step(t, slot.done, slot.next_obs)
            if self._with_value:
                views.value.copy_(out.value)
                # Only time-limit ends are bootstrapped; a rare event, so evaluate the critic
                # on the final observations only when one happened (a host check), or,
                # without host checks, every step (a critic forward instead of a sync).
                if not self.host_checks or slot.truncated.any():
                    mask = slot.truncated & ~slot.terminated
                    v_final = calls.value(env.final_obs)
                    torch.where(mask, v_final, views.final_value, out=views.final_value)
        if self._with_value:
            self.rollout[VALUE][:, -1] = calls.value(self.rollout[OBS][:, -1])

    def _group_step(self, t: int, done: torch.Tensor, next_obs: TensorDict) -> None:
        """Write `mask[:, t]`, then reset every group whose members are all done."""
        assert self.groups is not None
        torch.logical_not(self._waiting, out=self.rollout[MASK][:, t])
        self._waiting.logical_or_(done)
        if not self.groups.restart_groups:
            return
        size = self.groups.group_size
        finished = self._waiting.view(-1, size).all(1)
        if not finished.any():  # a host check, like the env's own auto-reset on CPU
            return
        ids = (finished.nonzero() * size + self._group_offsets).reshape(-1)
        next_obs[ids] = self.env.reset(env_ids=ids, group_size=size)[ids]
        self._waiting[ids] = False
        self._cut[t].index_fill_(0, ids, True)  # the members' solo episodes are not counted

    def _finished_episodes(self) -> EpisodeStats:
        """Return, length (and success) of every episode that ended in this rollout.

        Grouped collection counts only episodes inside the loss mask (group episodes).
        Episodes are listed env by env, each env's in the order they ended.

        The totals and the running sums are updated with fixed-shape ops (no host sync on an
        accelerator); the per-episode lists are computed only if read, from the carry before
        this rollout and the rollout itself, before the next `collect` refills it.
        """
        ro = self.rollout
        done = ro[DONE][:, :-1]
        ends = done.T  # [T, N], contiguous in this layout
        if self.groups is not None and self.groups.restart_groups:
            ends = ends | self._cut
        valid = ro[MASK][:, :-1].T if self.env.has_invalid_steps else None
        counted = done & ro[MASK][:, :-1] if MASK in ro else None  # [N, T]
        reward = ro[REWARD][:, :-1].T
        success = ro.get(SUCCESS, None)
        carry = self._running.clone()  # the episodes running before this rollout
        totals = episode_totals(
            reward,
            ends,
            carry,
            valid,
            None if counted is None else counted.T,
            None if success is None else success[:, :-1].T,
        )
        self._running.copy_(totals.carry)
        self._collects += 1
        collect = self._collects

        @torch.inference_mode()
        def episodes() -> EpisodeLists:
            if self._collects != collect:
                raise RuntimeError(
                    "the episodes' rollout was refilled by a later collect: read an "
                    "EpisodeStats' returns, lengths or successes (or resolve() it) first"
                )
            seg = episode_segments(reward, ends, carry, valid)
            where = seg.env, seg.step
            returns, lengths = seg.returns, seg.lengths
            successes = None if success is None else success[where]
            if counted is None:
                return returns, lengths, successes
            kept = counted[where]
            return returns[kept], lengths[kept], None if successes is None else successes[kept]

        return EpisodeStats.deferred(totals.sums, success is not None, episodes)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The current observation and the running episode sums (for exact resume)."""
        current = self.rollout[OBS][:, -1 if self._obs_at_end else 0]
        return {
            "obs": {key: value.clone() for key, value in current.items()},
            "episodes": self._running.clone(),
            "waiting": self._waiting.clone(),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what `state_dict` returned: the next rollout starts from that observation."""
        obs = self.rollout[OBS]
        for key, value in as_observation(state["obs"]).items():
            obs[key][:, 0] = value
        self._obs_at_end = False
        self._running.copy_(state["episodes"])
        self._waiting.copy_(state["waiting"])
