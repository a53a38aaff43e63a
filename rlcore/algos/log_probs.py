"""Log-probabilities of a rollout's actions under a policy, written into the rollout."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlcore.policies import Actor
from rlcore.rollout import ACTION, OBS

CHUNK = 16384  # transitions per forward


@torch.no_grad()
def write_log_probs(policy: Actor, rollout: TensorDict, key: str) -> None:
    """`rollout[key]` of every transition: log pi(action | obs) under `policy`'s actor (the
    critic, if any, is not run), a block of time steps of all envs at a time, in whatever
    precision the caller's autocast sets."""
    num_envs, num_steps = rollout.batch_size[0], rollout.batch_size[1] - 1
    # Time-major [T, N, ...] views: contiguous in the rollout's own layout.
    obs = {name: value[:, :-1].transpose(0, 1) for name, value in rollout[OBS].items()}
    action = rollout[ACTION][:, :-1].transpose(0, 1)
    out = rollout[key][:, :-1].transpose(0, 1)
    steps = max(1, CHUNK // num_envs)
    for t in range(0, num_steps, steps):
        block = slice(t, t + steps)
        o = {name: value[block].flatten(0, 1) for name, value in obs.items()}
        a = action[block].reshape(-1, *action.shape[2:])
        out[block] = Actor.evaluate(policy, o, a).log_prob.view(-1, num_envs)
