"""The contract every algorithm implements, and what the trainer hands its factory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rlcore.errors import NonFiniteError

if TYPE_CHECKING:  # stages that only evaluate a policy should not pay for importing it
    import gymnasium.spaces as spaces
    import torch

    from rlcore.collector import GroupEpisodes
    from rlcore.config import ExperimentConfig, PolicyConfig
    from rlcore.distributed import Distributed
    from rlcore.envs.base import BatchedEnv
    from rlcore.observations import ObsSpec
    from rlcore.policies import Actor


@dataclass(frozen=True)
class AlgorithmContext:
    """What the trainer hands `Algorithm.build`: the run's pieces, built once and shared.

    `total_updates` is the number of training iterations (an on-policy update per
    iteration); `generator` is the run's random stream (minibatch order, replay sampling).
    """

    cfg: Any
    experiment: ExperimentConfig
    policy: Actor
    env: BatchedEnv
    total_updates: int
    generator: torch.Generator
    dist: Distributed
    compile_loss: bool


class Algorithm(Protocol):
    """An algorithm class as the registry's factory names it (`rlcore.algos.registry`).

    On-policy algorithms (`off_policy = False`) consume one filled rollout per `update`
    and may ask the collector for grouped episodes (`groups`, GRPO). Off-policy ones
    (`off_policy = True`) get one sampled replay batch per `update` call (one gradient
    step) and return a detached stats tensor in `metric_names` order (no host sync per
    step); the trainer's off-policy loop owns the buffer, warm-up and update-to-data ratio.
    `same_step_reset`: every env step must be a transition (a Gymnasium env is then built
    to reset within the step).
    """

    off_policy: ClassVar[bool]
    same_step_reset: ClassVar[bool]
    groups: GroupEpisodes | None

    @staticmethod
    def make_policy(
        obs_spec: ObsSpec, action_space: spaces.Space, policy: PolicyConfig, cfg: Any
    ) -> Actor:
        """The policy this algorithm trains (what evaluation and video load), for the env's
        observation entries (`rlcore.observations`)."""
        ...

    @classmethod
    def build(cls, ctx: AlgorithmContext) -> Algorithm:
        """Build the algorithm for one run."""
        ...

    def update(self, data: Any) -> Any:
        """Optimise on a filled rollout (on-policy: return metrics by fixed name) or on a
        replay batch (off-policy: return the stats tensor)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What every rank shares (optimizer state, schedules): rank 0's is saved."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, on every rank, when a run resumes."""
        ...

    def rank_state_dict(self) -> dict[str, Any]:
        """What differs between ranks (e.g. each env's running return), saved per rank for
        exact resume; `{}` when nothing does."""
        ...

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        """Restore this rank's own `rank_state_dict` when a run resumes."""
        ...


# What the Trainer reads and calls on an algorithm class and its instances.
ALGORITHM_MEMBERS = (
    "off_policy", "same_step_reset", "groups", "make_policy", "build", "update",
    "state_dict", "load_state_dict", "rank_state_dict", "load_rank_state_dict",
)  # fmt: skip


def missing_members(cls: type) -> list[str]:
    """The members of the `Algorithm` contract that the class `cls` does not define."""
    return [name for name in ALGORITHM_MEMBERS if not hasattr(cls, name)]


__all__ = [
    "ALGORITHM_MEMBERS",
    "Algorithm",
    "AlgorithmContext",
    "NonFiniteError",
    "missing_members",
]
