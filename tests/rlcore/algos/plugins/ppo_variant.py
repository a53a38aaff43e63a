"""An algorithm of your own that takes PPO's presets (`presets_from="ppo"`), for the tests of
preset resolution: `registered(monkeypatch)` registers it for one test.

Its config shares some of PPO's settings by name and has one of its own (`mirror_coef`), so a
PPO preset gives it the former and leaves the latter at its default. Its factory is never
loaded: the tests that use it resolve presets, they do not train it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from rlcore.algos import registry
from rlcore.algos.registry import AlgorithmSpec


@dataclass(frozen=True)
class PPOVariantConfig:
    lr: float = 3e-4
    gamma: float = 0.99
    num_epochs: int = 10
    num_minibatches: int = 4
    mirror_coef: float = 0.5

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"ppo_variant.lr must be > 0, got {self.lr}")


VARIANT = AlgorithmSpec(
    "ppo_variant", PPOVariantConfig, f"{__name__}:PPOVariant", presets_from="ppo"
)
# The same algorithm without the declaration: it takes no presets.
UNDECLARED = dataclasses.replace(VARIANT, name="ppo_undeclared", presets_from=None)


def registered(monkeypatch: pytest.MonkeyPatch, spec: AlgorithmSpec = VARIANT) -> str:
    """Register `spec` until the test ends; return its name."""
    registry.algorithm_names()  # the builtins first: the test's registry holds them too
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)
    return spec.name
