"""The shared rollout: one preallocated TensorDict of batch shape [N, T + 1].

Layout (N envs, T steps; all on the training device):

| key               | shape              | dtype   | index T   | written by              |
|-------------------|--------------------|---------|-----------|-------------------------|
| `obs`             | [N, T+1] entries   | each's  | bootstrap | env (t+1), collector (0) |
| `action`          | [N, T+1, A] or [N, T+1] | float32 / int64 | padding | collector    |
| `sample_log_prob` | [N, T+1]           | float32 | padding   | collector               |
| `value`           | [N, T+1]           | float32 | bootstrap | collector (critic only) |
| `final_value`     | [N, T+1]           | float32 | padding   | collector (critic only) |
| `reward`          | [N, T+1]           | float32 | padding   | env                     |
| `done`, `terminated`, `truncated` | [N, T+1] | bool | padding | env                   |
| `success`         | [N, T+1]           | bool    | padding   | env (if it reports it)  |
| `advantage`       | [N, T+1]           | float32 | padding   | algorithm, in place     |
| `value_target`    | [N, T+1]           | float32 | padding   | algorithm (critic only) |
| `mask`            | [N, T+1]           | bool    | padding   | collector (GRPO only)   |
| `final_obs`       | [N, T+1] entries   | each's  | padding   | collector (off-policy)  |
| `ref_log_prob`    | [N, T+1]           | float32 | padding   | algorithm (GRPO only)   |

`obs` and `final_obs` are nested TensorDicts with one entry per named observation entry of
the env (`rlcore.observations`; a flat env's one entry is `obs/state`, float32 `[N, T+1, D]`),
each with its own shape and dtype: camera images are stored as uint8 `[N, T+1, C, H, W]`.

`final_obs[:, t]` is the true final observation of a transition done at t (stale elsewhere):
an off-policy learner stores it as that transition's `next_obs`, since `obs[:, t + 1]` is
then the first observation of the next episode.

`final_value[:, t]` is V(true final observation) for a transition truncated (and not
terminated) at t, and 0 elsewhere: PPO bootstraps time-limit ends with it, exactly.

Storage is time-major: each tensor is allocated as [T+1, N, ...] and exposed transposed, so
the logical batch shape stays [N, T+1] while the per-step slices `[:, t]` that the env and
collector write every step are contiguous (an env-major layout makes each of those writes
touch one cache line per env, many times slower at thousands of envs on CPU).

Algorithms read transitions only through `transition_view()`, which drops index T from every
key: a view, never a copy.

`mask[:, t]` says whether transition t reaches the loss: for GRPO, whether it belongs to its
group's current episode (a critic-free rollout has `mask` and no `value`, `final_value` or
`value_target`); for an env with invalid steps (`env.has_invalid_steps`), whether the step
was a real transition (the env writes it).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium.spaces as spaces
import torch
from tensordict import TensorDict

from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.observations import ObsSpec, allocate

OBS = "obs"
ACTION = "action"
SAMPLE_LOG_PROB = "sample_log_prob"
VALUE = "value"
FINAL_VALUE = "final_value"
REWARD = "reward"
DONE = "done"
TERMINATED = "terminated"
TRUNCATED = "truncated"
SUCCESS = "success"
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
MASK = "mask"
REF_LOG_PROB = "ref_log_prob"
FINAL_OBS = "final_obs"


@dataclass(frozen=True)
class RolloutSpec:
    """Sizes and options of a rollout; `action_shape` is () for discrete actions."""

    num_envs: int
    num_steps: int
    obs_spec: ObsSpec
    action_shape: tuple[int, ...]
    action_dtype: torch.dtype
    with_value: bool
    with_success: bool
    device: torch.device
    with_mask: bool = False
    with_final_obs: bool = False

    @staticmethod
    def for_env(
        env: BatchedEnv,
        num_steps: int,
        with_value: bool,
        with_mask: bool = False,
        with_final_obs: bool = False,
    ) -> RolloutSpec:
        """The rollout an env needs: action dtype/shape from its action space, success flag.

        `with_mask` is forced on for envs with invalid steps (see the module docstring).
        """
        discrete = isinstance(env.action_space, spaces.Discrete)
        return RolloutSpec(
            num_envs=env.num_envs,
            num_steps=num_steps,
            obs_spec=env.obs_spec,
            action_shape=() if discrete else (env.action_dim,),
            action_dtype=torch.int64 if discrete else torch.float32,
            with_value=with_value,
            with_success=env.has_success,
            device=env.device,
            with_mask=with_mask or env.has_invalid_steps,
            with_final_obs=with_final_obs,
        )

    def __post_init__(self) -> None:
        if self.num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {self.num_envs}")
        if self.num_steps <= 0:
            raise ValueError(f"num_steps must be a positive integer, got {self.num_steps}")


def make_rollout(spec: RolloutSpec) -> TensorDict:
    """Allocate the shared rollout once; every later iteration overwrites it in place."""
    n, t1, dev = spec.num_envs, spec.num_steps + 1, spec.device

    def time_major(*feature: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(t1, n, *feature, dtype=dtype, device=dev).transpose(0, 1)

    def scalar(dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return time_major(dtype=dtype)

    fields = {
        OBS: allocate(spec.obs_spec, (n, t1), dev, time_major=True),
        ACTION: time_major(*spec.action_shape, dtype=spec.action_dtype),
        SAMPLE_LOG_PROB: scalar(),
        REWARD: scalar(),
        DONE: scalar(torch.bool),
        TERMINATED: scalar(torch.bool),
        TRUNCATED: scalar(torch.bool),
        ADVANTAGE: scalar(),
    }
    if spec.with_value:
        fields |= {VALUE: scalar(), FINAL_VALUE: scalar(), VALUE_TARGET: scalar()}
    if spec.with_success:
        fields[SUCCESS] = scalar(torch.bool)
    if spec.with_mask:
        fields |= {MASK: scalar(torch.bool), REF_LOG_PROB: scalar()}
    if spec.with_final_obs:
        fields[FINAL_OBS] = allocate(spec.obs_spec, (n, t1), dev, time_major=True)
    return TensorDict(fields, batch_size=[n, t1], device=dev)


def num_steps(rollout: TensorDict) -> int:
    """Number of transitions per env (T) in a rollout of batch shape [N, T + 1]."""
    return rollout.batch_size[1] - 1


def transition_view(rollout: TensorDict) -> TensorDict:
    """Return the [N, T] view of the valid transitions (index T dropped from every key).

    `obs` and `value` of the view are the observations and values the actions were taken
    from; their bootstrap entries at T stay reachable through the full rollout.
    """
    return rollout[:, :-1]


def step_slots(rollout: TensorDict, with_valid: bool = False) -> list[StepSlot]:
    """Per-step views into the rollout where the env writes transition t (and obs t + 1),
    with the action column it reads; `with_valid`: the env also writes `mask[:, t]` (envs
    with invalid steps)."""
    obs, success = rollout[OBS], rollout.get(SUCCESS, None)
    valid = rollout[MASK] if with_valid else None
    return [
        StepSlot(
            reward=rollout[REWARD][:, t],
            terminated=rollout[TERMINATED][:, t],
            truncated=rollout[TRUNCATED][:, t],
            done=rollout[DONE][:, t],
            next_obs=obs[:, t + 1],
            success=None if success is None else success[:, t],
            valid=None if valid is None else valid[:, t],
            action=rollout[ACTION][:, t],
        )
        for t in range(num_steps(rollout))
    ]


def nominal_bytes(rollout: TensorDict) -> int:
    """Bytes held by the rollout's tensors (the yardstick for update-time memory)."""
    return sum(
        t.numel() * t.element_size() for t in rollout.values(include_nested=True, leaves_only=True)
    )
