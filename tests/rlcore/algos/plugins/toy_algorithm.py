"""An algorithm from outside the package: registered here, trained through the CLI.

`algorithm.name: "toy_algorithm:toy"` imports this module, which registers `toy`. It is a
vanilla policy gradient on per-step rewards (no baseline): enough to move the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from rlcore.algos.registry import AlgorithmSpec, ReportedSettings, register_algorithm
from rlcore.policies import Actor
from rlcore.rollout import ACTION, OBS, REWARD, transition_view


@dataclass(frozen=True)
class ToyConfig:
    lr: float = 1e-3

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"toy.lr must be > 0, got {self.lr}")

    def report(self) -> ReportedSettings:
        return ReportedSettings(optimizer=(f"lr {self.lr:g}",), summary="no baseline")


class Toy:
    off_policy: ClassVar[bool] = False
    same_step_reset: ClassVar[bool] = False
    groups = None

    @staticmethod
    def make_policy(obs_spec, action_space, policy, cfg) -> Actor:
        return Actor(obs_spec, action_space, policy)

    @classmethod
    def build(cls, ctx) -> Toy:
        return cls(ctx.policy, ctx.cfg)

    def __init__(self, policy: Actor, cfg: ToyConfig) -> None:
        self.policy = policy
        self.optimizer = torch.optim.SGD(policy.parameters(), lr=cfg.lr)
        self.updates = 0

    def update(self, rollout) -> dict[str, float]:
        tv = transition_view(rollout)
        obs, action, reward = (tv[key].flatten(0, 1) for key in (OBS, ACTION, REWARD))
        loss = -(self.policy.evaluate(obs, action).log_prob * (reward - reward.mean())).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        return {"loss/policy": loss.item()}

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = state["updates"]

    def rank_state_dict(self) -> dict[str, Any]:
        return {}

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        pass


register_algorithm(AlgorithmSpec("toy", ToyConfig, "toy_algorithm:Toy"))
