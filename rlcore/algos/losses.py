"""Loss pieces shared by the policy-gradient algorithms (PPO, GRPO)."""

from __future__ import annotations

import torch

from rlcore.errors import NonFiniteError


def clipped_surrogate(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantage: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the PPO-clip policy loss and the probability ratio.

    Shape:
        all inputs: [B]; returns a scalar loss and the ratio [B]
    """
    ratio = (log_prob - old_log_prob).exp()
    unclipped = advantage * ratio
    clipped = advantage * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    return -torch.minimum(unclipped, clipped).mean(), ratio


def k3_kl(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """Mean k3 estimate of KL(policy || reference) from samples of the behaviour policy.

    `r - log r - 1` with `r = p_ref / p` (Schulman, "Approximating KL divergence"):
    non-negative and unbiased for samples of the policy itself.

    Shape:
        log_prob, ref_log_prob: [B]; returns a scalar
    """
    log_ratio = ref_log_prob - log_prob
    return (log_ratio.exp() - log_ratio - 1.0).mean()


def approx_kl(ratio: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(behaviour || current) from the probability ratio current / old."""
    return ((ratio - 1) - ratio.log()).mean()


def clip_fraction(ratio: torch.Tensor, clip_eps: float) -> torch.Tensor:
    """Share of samples whose probability ratio lies outside the clip range."""
    return ((ratio - 1).abs() > clip_eps).float().mean()


def raise_if_non_finite(
    algorithm: str, loss: torch.Tensor, stats: torch.Tensor, shown: dict[str, int]
) -> None:
    """Stop before a NaN or infinity reaches the parameters, naming the loss's parts
    (`shown`: name -> index into `stats`, read only on failure).

    Called outside the (optionally compiled) loss: it reads the loss on the host.
    """
    if not torch.isfinite(loss):
        parts = ", ".join(f"{name}={stats[i].item()}" for name, i in shown.items())
        raise NonFiniteError(
            f"{algorithm} loss became non-finite ({parts}); parameters were not updated"
        )
