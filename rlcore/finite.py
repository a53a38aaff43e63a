"""Finite checks of a training iteration: the env's outputs in the rollout and the losses.

A NaN or infinity must stop training before it reaches a checkpoint or an evaluation. The
flags are computed on the device (`nonfinite_flags`) and read where the trainer next reads
the device anyway (`rlcore.pending`), so checking costs no host sync of its own.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from rlcore.algos.base import NonFiniteError
from rlcore.rollout import OBS, REWARD, transition_view


def checked_outputs(rollout: TensorDict) -> list[tuple[str, torch.Tensor]]:
    """The env's floating-point outputs in `rollout` (observation entries and the reward),
    each with the name an error reports."""
    observations = [(f"{OBS}/{key}", value) for key, value in rollout[OBS].items()]
    return [
        (key, tensor)
        for key, tensor in [*observations, (REWARD, transition_view(rollout)[REWARD])]
        if tensor.dtype.is_floating_point
    ]


def nonfinite_flags(rollout: TensorDict) -> torch.Tensor:
    """[checked outputs] bool on the rollout's device: whether each of `checked_outputs`
    holds a NaN or infinity."""
    flags = [~torch.isfinite(tensor).all() for _, tensor in checked_outputs(rollout)]
    return torch.stack(flags) if flags else torch.zeros(0, dtype=torch.bool)


def raise_if_env_nonfinite(
    rollout: TensorDict, flags: torch.Tensor | list[float], iteration: int
) -> None:
    """Raise `NonFiniteError` naming the first output `flags` (from `nonfinite_flags`)
    marks; reads `flags` on the host if it is a tensor."""
    flags = flags.tolist() if isinstance(flags, torch.Tensor) else flags
    for (key, _), bad in zip(checked_outputs(rollout), flags, strict=True):
        if bad:
            raise NonFiniteError(
                f"the env produced a non-finite {key} in iteration {iteration}; "
                "training stopped and the last checkpoint was left as it was"
            )


def raise_if_loss_nonfinite(algorithm: str, metrics: dict[str, float], iteration: int) -> None:
    """Raise `NonFiniteError` if a `loss/` metric read from the device is not finite: a step
    the update refused to take (`rlcore.algos.whole_step`), so training stops before a
    checkpoint or evaluation follows."""
    losses = {key: value for key, value in metrics.items() if key.startswith("loss/")}
    if all(math.isfinite(value) for value in losses.values()):
        return
    parts = ", ".join(f"{key.removeprefix('loss/')}={value}" for key, value in losses.items())
    raise NonFiniteError(
        f"{algorithm.upper()} loss became non-finite in iteration {iteration} ({parts}); the "
        "parameters kept their last finite values, training stopped and the last checkpoint "
        "was left as it was"
    )
