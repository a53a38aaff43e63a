"""The tiny experiment the train, report and stage-chain tests share: six PPO iterations on
cartpole, evaluated every second one, and what they read back from a checkpoint."""

from rlcore.checkpoint import load_checkpoint

TINY = {
    "name": "tiny",
    "preset": "none",  # the library's defaults: no stop target from the cartpole preset
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"lr": 1e-3, "num_epochs": 2, "num_minibatches": 2}},
    "trainer": {
        "total_env_steps": 8 * 16 * 6,  # 6 iterations
        "num_steps": 16,
        "eval_every_iters": 2,
        "eval_episodes": 4,
        "checkpoint_every_iters": 2,
    },
    "evaluation": {"episodes": 5, "seed": 123},
    "video": {"episodes": 3, "columns": 2, "frame_size": 48, "max_steps": 20, "fps": 10},
}


def policy_weights(path):
    return load_checkpoint(path)["policy"]
