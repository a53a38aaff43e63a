"""What maps to what: EmbodiChain's env ids, policies, algorithm defaults and key names
beside ours, and why a key has no equivalent here.
"""

from __future__ import annotations

from typing import Any

ENV_IDS = {"PushCubeRL": "push_cube"}  # EmbodiChain env id -> our builtin env
POLICIES = {"ppo": "actor_critic", "grpo": "actor_only"}  # EmbodiChain's policy per algorithm
# EmbodiChain's PPOCfg and GRPOCfg: what a key the file leaves out was there.
THEIR_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": {"learning_rate": 3e-4, "n_epochs": 10, "batch_size": 64, "gamma": 0.99,
            "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.01, "vf_coef": 0.5,
            "max_grad_norm": 0.5},
    "grpo": {"learning_rate": 3e-4, "n_epochs": 10, "batch_size": 64, "gamma": 0.99,
             "clip_coef": 0.2, "ent_coef": 0.0, "kl_coef": 0.02, "group_size": 4, "eps": 1e-8,
             "reset_every_rollout": True, "max_grad_norm": 0.5, "truncate_at_first_done": True},
}  # fmt: skip
# Their key -> ours, same meaning and units (batch_size, vf_coef and truncate_at_first_done
# are converted in `_algorithm`).
_COMMON = {"learning_rate": "lr", "n_epochs": "num_epochs", "clip_coef": "clip_eps"}
RENAMES: dict[str, dict[str, str]] = {
    "ppo": {**_COMMON, **{k: k for k in ("gamma", "gae_lambda", "ent_coef", "max_grad_norm")}},
    "grpo": {
        **_COMMON,
        **{k: k for k in ("gamma", "ent_coef", "kl_coef", "group_size", "eps", "max_grad_norm")},
        "reset_every_rollout": "reset_every_rollout",
    },
}

_WANDB = "Weights & Biases logging; metrics go to metrics/ (DVC) and the report"
_SCENE = "the simulated scene of EmbodiChain's task; push_cube is a builtin planar task"
WHY: dict[str, str] = {  # why a key has no equivalent (otherwise: "no equivalent here")
    "trainer.headless": "the simulator's viewer window; builtin envs have none",
    "trainer.enable_rt": "the simulator's ray-traced rendering",
    "trainer.gpu_id": "the simulator's GPU; here the one device is env.device",
    "trainer.use_wandb": _WANDB,
    "trainer.wandb_project_name": _WANDB,
    "trainer.events": "EmbodiChain event functors (a camera recording evaluation); "
    "the `video` stage records evaluation episodes (params `video`)",
    "policy.action_dim": "the action size comes from the env's action space here",
    "algorithm.cfg.device": "the device is env.device (from trainer.device)",
    "actions": "action-manager terms of the simulated robot; push_cube's action is a "
    "2-D pusher velocity in [-1, 1]",
    "extensions": "task parameters of EmbodiChain's PushCubeRL; push_cube's are fixed "
    "(success within 5 cm of the goal, 100-step episodes)",
}
_EXPAND = ("trainer", "env", "env.cfg", "cfg", "policy", "algorithm", "algorithm.cfg")
