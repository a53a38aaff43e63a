"""What an env is like, read by the platform itself: sizes, early termination, reward scale.

Defaults for a task family have to carry to tasks nobody tuned. Where one setting cannot
serve a whole family, the split must come from properties the platform can measure on any
env, never from a hand-kept list of env ids: the sizes of its spaces, whether a random
policy's episodes end early (a fallen walker) or only at the time limit, and the scale of
its per-step reward, all from one short random rollout.
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium.spaces as spaces
import torch

from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.observations import ObsEntry

PROBE_STEPS = 1_000
"""Random steps per env instance: every MuJoCo walker falls within that (Ant, Hopper,
Walker2d, Humanoid: tens to hundreds of steps), and rewards have settled to their scale."""


@dataclasses.dataclass(frozen=True)
class EnvTraits:
    """An env's properties that defaults may depend on (`measure_traits`)."""

    obs_size: int  # values per observation, all entries (an image's pixels and channels)
    action_size: int  # a Box's dimensions, or a Discrete's number of choices
    discrete: bool
    max_episode_steps: int
    terminates_early: bool  # some random-policy episode ended by `terminated`
    reward_mean: float  # of a random policy's per-step reward
    reward_std: float

    def describe(self) -> str:
        """The traits in one line of words (for logs and messages)."""
        ends = "terminates early" if self.terminates_early else "ends at the time limit only"
        kind = "discrete" if self.discrete else "continuous"
        return (
            f"obs {self.obs_size}, {kind} actions {self.action_size}, {ends}, random "
            f"policy's reward {self.reward_mean:.3g} +- {self.reward_std:.3g} per step"
        )


def _size(entry: ObsEntry) -> int:
    return math.prod(entry.shape)


def random_actions(
    space: spaces.Box | spaces.Discrete, n: int, device: torch.device, gen: torch.Generator
) -> torch.Tensor:
    """Uniform random actions for `n` instances: a Box's (finite) bounds or a Discrete's
    choices; an unbounded Box dimension draws from [-1, 1]."""
    if isinstance(space, spaces.Discrete):
        choice = torch.randint(int(space.n), (n,), generator=gen)
        return (choice + int(space.start)).to(device)
    low = torch.as_tensor(space.low, dtype=torch.float32).clamp(min=-1.0e6)
    high = torch.as_tensor(space.high, dtype=torch.float32).clamp(max=1.0e6)
    unbounded = ~(torch.isfinite(torch.as_tensor(space.low)) & torch.isfinite(
        torch.as_tensor(space.high)
    ))  # fmt: skip
    low, high = torch.where(unbounded, -1.0, low), torch.where(unbounded, 1.0, high)
    u = torch.rand(n, *space.shape, generator=gen)
    return (low + u * (high - low)).to(device)


@torch.inference_mode()
def measure_traits(env: BatchedEnv, steps: int = PROBE_STEPS, seed: int = 0) -> EnvTraits:
    """`env`'s traits from `steps` uniform random actions on each of its instances (seeded:
    the same env and seed measure the same traits)."""
    gen = torch.Generator().manual_seed(seed)
    slot = StepSlot.allocate(env.num_envs, env.obs_spec, env.device, env.has_success)
    if env.has_invalid_steps:
        valid = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
        slot = dataclasses.replace(slot, valid=valid)
    env.reset(seed=seed)
    rewards, terminated = [], False
    for _ in range(steps):
        env.step(random_actions(env.action_space, env.num_envs, env.device, gen), slot)
        real = slot.valid if slot.valid is not None else torch.ones_like(slot.done)
        rewards.append(slot.reward[real].float().cpu())
        terminated = terminated or bool((slot.terminated & real).any())
    reward = torch.cat(rewards)
    discrete = isinstance(env.action_space, spaces.Discrete)
    return EnvTraits(
        obs_size=sum(_size(entry) for entry in env.obs_spec.values()),
        action_size=int(env.action_space.n) if discrete else env.action_dim,
        discrete=discrete,
        max_episode_steps=int(env.max_episode_steps),
        terminates_early=terminated,
        reward_mean=float(reward.mean()),
        reward_std=float(reward.std()) if reward.numel() > 1 else 0.0,
    )
