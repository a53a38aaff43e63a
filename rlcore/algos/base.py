"""The interface every on-policy algorithm implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from rlcore.errors import NonFiniteError

if TYPE_CHECKING:  # stages that only evaluate a policy should not pay for importing it
    from tensordict import TensorDict


class Algorithm(Protocol):
    """Consumes one filled rollout per call and updates the policy in place."""

    needs_value: bool

    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Run the optimisation phase on a filled rollout; return metrics by fixed name."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


__all__ = ["Algorithm", "NonFiniteError"]
