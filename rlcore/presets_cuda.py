"""Presets for a GPU: thousands of envs on the training device, short rollouts, big minibatches.

On a GPU an iteration's cost is mostly fixed (kernel launches per env step and per minibatch
step), whatever the number of envs, so what time-to-target counts is iterations. These
settings take the fewest iterations to the target among those tried at N = 4,096 (compared
on a CPU, where settings take about as many iterations as on a GPU: the same algorithm, other
random streams; benchmarks/README.md, *cuda_presets*, with their times on an H100), in the
spirit of rsl_rl and MuJoCo Playground: 16-step rollouts, 8 to 10 epochs of 8 minibatches
of 8,192.

`cuda_halfcheetah` (native HalfCheetah on MuJoCo Warp, `pip install -e ".[mujoco-warp]"`) takes
Brax's HalfCheetah batching (20-step rollouts, 8 epochs, gamma 0.95) on the platform's PPO.

They set `env.device: cuda`; on a machine without CUDA they fail with one line naming it
(`rlcore.envs.check_device`). `runtime.compile: true` adds the compiled, CUDA-graphed update.
"""

from __future__ import annotations

from rlcore.algos.config import PPOConfig
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig, TrainerConfig

CUDA_ENVS = 4096

CUDA_PRESETS: dict[str, ExperimentConfig] = {
    # kl_adaptive (rsl_rl's rule): of the settings tried, the fewest iterations on average
    # and the steadiest across seeds; a constant rate with fewer minibatch steps solved in a
    # handful of iterations on one seed and not in a hundred on others.
    "cuda_cartpole": ExperimentConfig(
        env=EnvConfig("cartpole", num_envs=CUDA_ENVS, device="cuda"),
        policy=PolicyConfig(hidden_sizes=(64, 64), activation="relu"),
        algo=PPOConfig(lr=1e-3, lr_schedule="kl_adaptive", num_epochs=8, num_minibatches=8),
        trainer=TrainerConfig(
            total_env_steps=CUDA_ENVS * 16 * 100,
            num_steps=16,
            eval_every_iters=2,
            stop_at_eval_return=475,
        ),
    ),
    # PushCube's settings (normalised observations, rewards x 0.1) at twice its rate, which
    # the larger minibatches carry: fewer iterations to success 0.9 than at its own rate,
    # with half the epochs, or with 8-step rollouts.
    "cuda_push_cube": ExperimentConfig(
        env=EnvConfig("push_cube", num_envs=CUDA_ENVS, device="cuda"),
        policy=PolicyConfig(activation="relu", normalize_obs=True, init_log_std=-0.5),
        algo=PPOConfig(lr=2e-3, gamma=0.99, reward_scale=0.1, num_epochs=10, num_minibatches=8),
        trainer=TrainerConfig(
            total_env_steps=CUDA_ENVS * 16 * 200,
            num_steps=16,
            eval_every_iters=2,
            eval_episodes=64,
            stop_at_eval_success=0.9,
        ),
    ),
    # Brax's HalfCheetah PPO settings in spirit (short rollouts, gamma 0.95, entropy 1e-3,
    # 8 epochs) with 8 minibatches of 10,240: on an H200, return >= 5,000 in 15 s warm (3/3
    # seeds; 70 s in a fresh process, compiling included); N = 16,384 took 24 s
    # (benchmarks/README.md, *fast_path*).
    "cuda_halfcheetah": ExperimentConfig(
        env=EnvConfig("mujoco:HalfCheetah", num_envs=CUDA_ENVS, device="cuda"),
        policy=PolicyConfig(
            hidden_sizes=(256, 256), activation="relu", normalize_obs=True, init_log_std=-0.5
        ),
        algo=PPOConfig(
            lr=3e-4,
            gamma=0.95,
            ent_coef=1e-3,
            normalize_reward=True,
            num_epochs=8,
            num_minibatches=8,
        ),
        trainer=TrainerConfig(
            total_env_steps=CUDA_ENVS * 20 * 250,
            num_steps=20,
            eval_every_iters=10,
            eval_episodes=16,
            stop_at_eval_return=5000,
        ),
    ),
}
