"""Rebuild a trained policy from its experiment config and a training checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from rlcore.algos.registry import algorithm_spec
from rlcore.checkpoint import CheckpointError, config_hash, config_hashes, load_checkpoint
from rlcore.config import ExperimentConfig
from rlcore.envs import BatchedEnv, make_env
from rlcore.policies import Actor


def build_policy(cfg: ExperimentConfig, env: BatchedEnv) -> Actor:
    """The (untrained) policy `cfg`'s algorithm trains on `env`; raises `ConfigError` when
    the algorithm cannot drive the env (SAC on discrete actions), before any file is read."""
    make_policy = algorithm_spec(cfg.algorithm).load_policy_factory()
    return make_policy(env.obs_spec, env.action_space, cfg.policy, cfg.algo)


def check_experiment(cfg: ExperimentConfig) -> None:
    """Build what a run builds first, its env (one instance) and its policy, then let them
    go: whatever a run would refuse there (an unusable `env.device`, an action space no
    policy takes, SAC on discrete actions, an observation entry an encoder cannot read)
    raises the same `ConfigError` here, so `params` refuses what `train` refuses."""
    env = make_env(cfg.env, num_envs=1)
    try:
        build_policy(cfg, env)
    finally:
        env.close()


def load_trained_policy(
    cfg: ExperimentConfig,
    path: str | Path,
    device: str | torch.device | None = None,
    env: BatchedEnv | None = None,
) -> Actor:
    """The policy saved in `path` by a `Trainer` of configuration `cfg`, in eval mode.

    Fails with `CheckpointError` if the file is damaged, holds NaN or infinite weights, or
    was written by another configuration (its weights would not fit, or would silently
    mean something else). `env`: one of `cfg`'s envs already built (default: a probe).
    """
    device = torch.device(device or cfg.env.device)
    state = load_checkpoint(path, map_location=device)
    expected = config_hash(cfg)
    if state["config_hash"] not in config_hashes(cfg):
        raise CheckpointError(
            f"checkpoint {path} was written by a different configuration (hash "
            f"{state['config_hash']}, expected {expected}): retrain with this configuration"
        )
    # The policy the algorithm trains (PPO's critic is loaded with the actor and not used).
    policy = build_policy(cfg, env if env is not None else make_env(cfg.env, num_envs=1))
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as exc:  # e.g. a layer an earlier release's encoder did not have
        first = str(exc).splitlines()[0].rstrip(":. ")
        raise CheckpointError(
            f"checkpoint {path} does not fit this release's policy ({first}): retrain with "
            f"this configuration"
        ) from None
    broken = [name for name, value in state["policy"].items() if not value.isfinite().all()]
    if broken:
        raise CheckpointError(
            f"checkpoint {path} holds non-finite weights ({', '.join(broken[:3])}"
            f"{', ...' if len(broken) > 3 else ''}): nothing it does means anything; retrain "
            f"or restore a good copy"
        )
    return policy.to(device).eval()
