"""SAC's configuration and registration, apart from the algorithm so reading it needs no torch."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.algos.config import PRECISIONS, _checker
from rlcore.algos.registry import AlgorithmSpec, ReportedSettings, register_algorithm


@dataclass(frozen=True)
class SACConfig:
    """Soft Actor-Critic for continuous (Box) actions.

    `lr` is the actor's step size; `critic_lr` and `alpha_lr` default to it. `init_alpha`
    is the entropy temperature at the start; with `autotune_alpha` it is learned so that
    the policy's entropy tracks `target_entropy` (null: -|A|, Haarnoja et al., 2018b).
    `critic_hidden_sizes` (null: `policy.hidden_sizes`) sizes the twin Q networks.
    `precision: bfloat16` runs the hidden layers' matrix products of the update in bfloat16
    (autocast) and everything else in float32: the weights, their optimizer state, the
    Q outputs, targets and losses. CPUs with AVX512-BF16 or AMX (and GPUs) multiply bf16
    faster than float32, which shortens the update of wide networks most (benchmarks/
    README.md, *sac_update*).
    `auto` picks bfloat16 where the training device multiplies it natively
    (`rlcore.precision.native_bf16`), float32 elsewhere (where emulated bf16 is slower).
    The replay buffer and the update-to-data ratio are the `replay` section's.

    From pixels (image observation entries) the critics train one image encoder per entry,
    which the actor reads without training it (DrQ-v2, Yarats et al. 2021);
    `random_shift` pads each sampled image by that many pixels and crops it back at a random
    offset (DrQ's augmentation; 0: none; 4 at 84x84 in the papers).
    """

    gamma: float = 0.99
    tau: float = 0.005
    lr: float = 3e-4
    critic_lr: float | None = None
    alpha_lr: float | None = None
    init_alpha: float = 1.0
    autotune_alpha: bool = True
    target_entropy: float | None = None
    reward_scale: float = 1.0
    critic_hidden_sizes: tuple[int, ...] | None = None
    adam_eps: float = 1e-8
    precision: str = "float32"
    random_shift: int = 0

    def __post_init__(self) -> None:
        check = _checker("sac", self)
        check(0.0 < self.gamma <= 1.0, "gamma", "in (0, 1]")
        check(0.0 < self.tau <= 1.0, "tau", "in (0, 1]")
        check(self.lr > 0, "lr", "> 0")
        check(self.critic_lr is None or self.critic_lr > 0, "critic_lr", "> 0 or null")
        check(self.alpha_lr is None or self.alpha_lr > 0, "alpha_lr", "> 0 or null")
        check(self.init_alpha > 0, "init_alpha", "> 0")
        check(self.reward_scale > 0, "reward_scale", "> 0")
        check(self.adam_eps > 0, "adam_eps", "> 0")
        check(self.precision in PRECISIONS, "precision", f"one of {list(PRECISIONS)}")
        check(0 <= self.random_shift <= 32, "random_shift", "pixels in [0, 32]")
        sizes = self.critic_hidden_sizes
        check(
            sizes is None or (len(sizes) > 0 and all(h > 0 for h in sizes)),
            "critic_hidden_sizes",
            "positive ints or null",
        )

    def report(self) -> ReportedSettings:
        """What the run report shows of these settings."""
        alpha = "learned" if self.autotune_alpha else "fixed"
        mixed = {"bfloat16": ", bf16 matmuls", "auto": ", bf16 matmuls where native"}.get(
            self.precision, ""
        )
        return ReportedSettings(
            optimizer=(f"lr {self.lr:g}", f"gamma {self.gamma:g}", f"tau {self.tau:g}"),
            summary=f"twin critics, tau {self.tau:g}, temperature {alpha} from "
            f"{self.init_alpha:g}{mixed}",
        )


register_algorithm(
    AlgorithmSpec(
        "sac", SACConfig, "rlcore.algos.sac:SAC", "rlcore.policies:squashed_gaussian_policy"
    )
)
