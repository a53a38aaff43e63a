"""The collector's policy calls compiled: `runtime.compile`'s act step.

A collection step on the small networks of control tasks is dozens of tiny tensor ops
(normalisation, two MLPs, sampling, log-probability), each costing more in dispatch than in
arithmetic, once per env step. Compiled, the act step is a few generated kernels. The
random draws stay outside the compiled code (a generator cannot enter it): they are made
first, eagerly, with the same calls in the same order as the eager `Actor.act`, so both
paths sample from the same stream and agree to float rounding.
"""

from __future__ import annotations

import torch

from rlcore.algos.compile import compiled
from rlcore.policies import Actor, ActOutput
from rlcore.policy_inputs import Observation, batch_size


class CompiledAct:
    """`policy.act` and `policy.value` with the networks compiled (`torch.compile`).

    Observations may be TensorDicts (the rollout's views): they enter the compiled code as
    plain dicts of their entries. Parameters and normaliser statistics change in place
    between calls, which compiled code reads as inputs: no recompiling.
    """

    def __init__(self, policy: Actor) -> None:
        self.policy = policy
        # Sizes start static and turn dynamic when a second one appears in the process.
        self._act = compiled(policy.act_with_noise)
        self._value = compiled(policy.value) if policy.has_critic else None

    def act(self, obs: Observation, generator: torch.Generator | None = None) -> ActOutput:
        """`policy.act(obs, generator)`: the same draws, the networks compiled."""
        noise = self.policy.sampling_noise(batch_size(obs), generator, self.policy.network_device)
        return self._act(_plain(obs), noise)

    def value(self, obs: Observation) -> torch.Tensor:
        """`policy.value(obs)`, compiled."""
        if self._value is None:
            raise TypeError("the policy has no critic")
        return self._value(_plain(obs))


def _plain(obs: Observation) -> torch.Tensor | dict[str, torch.Tensor]:
    """A tensor as it is; a mapping of entries (a TensorDict) as a plain dict."""
    return obs if isinstance(obs, torch.Tensor) else dict(obs.items())
