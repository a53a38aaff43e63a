"""Rebuild a trained policy from its experiment config and a training checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from rlcore.algos.registry import algorithm_spec
from rlcore.checkpoint import CheckpointError, config_hash, load_checkpoint
from rlcore.config import ExperimentConfig
from rlcore.envs import make_env
from rlcore.policies import Actor


def load_trained_policy(
    cfg: ExperimentConfig, path: str | Path, device: str | torch.device | None = None
) -> Actor:
    """The policy saved in `path` by a `Trainer` of configuration `cfg`, in eval mode.

    Fails with `CheckpointError` if the file is damaged or was written by another
    configuration (its weights would not fit, or would silently mean something else).
    """
    device = torch.device(device or cfg.env.device)
    state = load_checkpoint(path, map_location=device)
    expected = config_hash(cfg)
    if state["config_hash"] != expected:
        raise CheckpointError(
            f"checkpoint {path} was written by a different configuration (hash "
            f"{state['config_hash']}, expected {expected}): retrain with this configuration"
        )
    probe = make_env(cfg.env, num_envs=1)
    # The policy the algorithm trains (PPO's critic is loaded with the actor and not used).
    algorithm = algorithm_spec(cfg.algorithm).load()
    policy = algorithm.make_policy(probe.obs_dim, probe.action_space, cfg.policy, cfg.algo)
    policy.load_state_dict(state["policy"])
    return policy.to(device).eval()
