"""One shuffled minibatch iterator shared by every on-policy algorithm."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from tensordict import TensorDict


def iterate_minibatches(
    transitions: TensorDict,
    keys: Sequence[str],
    num_minibatches: int,
    generator: torch.Generator,
) -> Iterator[TensorDict]:
    """Yield `num_minibatches` disjoint random minibatches covering every transition once.

    Gathers only the requested keys, one minibatch at a time, so the extra memory is one
    minibatch rather than a shuffled copy of the rollout.

    Shape:
        transitions: [N, T] (a `transition_view`)
        yields: [B] with B = N * T / num_minibatches (the last may be smaller)
    """
    num_envs, num_steps = transitions.batch_size
    total = num_envs * num_steps
    if not 1 <= num_minibatches <= total:
        raise ValueError(f"num_minibatches must be in [1, {total}], got {num_minibatches}")
    device = transitions.device
    perm = torch.randperm(total, generator=generator, device=device)
    sources = {key: transitions[key] for key in keys}
    for chunk in perm.tensor_split(num_minibatches):
        env_idx, step_idx = chunk // num_steps, chunk % num_steps
        batch = {key: src[env_idx, step_idx] for key, src in sources.items()}
        yield TensorDict(batch, batch_size=[chunk.numel()], device=device)
