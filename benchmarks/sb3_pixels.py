"""PPO from pixels, ours vs Stable-Baselines3's `MultiInputPolicy` on the same env: wall time
per env step.

Run from the repository root (SB3 needs the `bench` extra), e.g.

    .venv/bin/python -m benchmarks.sb3_pixels
    .venv/bin/python -m benchmarks.sb3_pixels --steps 8192 --reps 1 --json out.json

The env is `push_cube_pixels` (a uint8 3x48x48 camera image, the pusher's 4-d `proprio`
and a privileged state), built by `rlcore.envs.make_env` from the preset's env config for
both sides: ours steps it directly, SB3 through `benchmarks.sb3_vec_env.BatchedVecEnv`
(SB3's `VecEnv` API over our batched env, numpy in and out, `terminal_observation` from
the env's final observations). Both read `image` and `proprio`, the actor's entries: SB3
has no asymmetric critic, so our critic reads them too, with its own image encoder
(SB3's `share_features_extractor=False`), instead of the preset's privileged state.

- ours: `Trainer` with `PRESETS["push_cube_pixels"]`, `actor_obs` = `critic_obs` =
  (image, proprio), checkpointing off, no periodic evaluation; the run's one evaluation
  (after its last iteration, 1 episode) is timed by the metrics sink and subtracted.
- SB3: `PPO("MultiInputPolicy", ...)` with the preset's settings read from its config:
  n_envs x n_steps (64 x 64), batch size = n_envs x n_steps / num_minibatches, n_epochs,
  learning rate, gamma, GAE lambda, clip range, entropy and value coefficients, gradient
  norm, Adam eps, initial log-std, the hidden sizes and activation of actor and critic.
  `benchmarks.sb3_vec_env.EncoderExtractor` is the features extractor: our `ImageEncoder`
  (`spatial`, 32 features) for the image, `proprio` concatenated, the input our policy's
  networks read; SB3 builds one per network. Proprio is normalised by SB3's `VecNormalize`
  (observations only, clipped at 10, like `normalize_obs`), rewards scaled by the preset's
  `reward_scale` in the adapter.

What still differs: our normaliser updates after each iteration's update from the rollout,
VecNormalize at every step before the policy sees it (and it copies the observation dict
each step); SB3's orthogonal init also covers the encoder's last 1x1 conv (ours keeps
torch's default there); SB3 computes the value of each truncated episode's last
observation in a separate forward per env, ours in one batch. Neither changes what is
computed per env step by much; the update (10 epochs of 8 minibatches through two CNNs)
is most of both sides' time.

Method: one process, torch intra-op threads `--threads` (default 1:
`torch.set_num_threads(1)`, applied to both), CPU. After an untimed warm-up (one iteration
each), every repetition builds a fresh trainer and a fresh SB3 model (construction timed
apart, as `build s`) and times `Trainer.run()` (evaluation subtracted) and
`PPO.learn(total_timesteps=--steps)`; ours then SB3's, reversed every other repetition.
Wall time per env step = that time / env steps (`--steps`, a multiple of 64 x 64 =
4096; default 4 iterations). The ratio is ours / SB3's of the medians over `--reps`
(target <= 0.5, issue P15), with the median of the per-repetition ratios beside it.
Breakdown: ours from the trainer's `time/collect_s` and `time/update_s`; SB3's collection
is timed by a callback between `on_rollout_start` and `on_rollout_end` (SB3 computes GAE
there; ours in the update), the rest of `learn` counted as its update.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import torch

from benchmarks.common import base_parser, print_table, setup, verdict, write_json
from benchmarks.solve_time import SB3_INSTALL_HINT
from rlcore.config import ExperimentConfig
from rlcore.envs import make_env
from rlcore.presets import PRESETS
from rlcore.trainer import Trainer

TASK = "push_cube_pixels"
READS = ("image", "proprio")  # what the actor reads; both networks do, on both sides
TARGET_RATIO = 0.5  # issue P15: ours <= 0.5x SB3's wall time per env step
DEFAULT_ITERS = 4  # 16,384 env steps: each iteration costs the same, ~9 s a side on one core


def our_config(steps: int, seed: int) -> ExperimentConfig:
    """The preset, both networks reading `READS`, no checkpoints or periodic evaluation."""
    base = PRESETS[TASK]
    policy = dataclasses.replace(base.policy, actor_obs=READS, critic_obs=READS)
    trainer = dataclasses.replace(
        base.trainer,
        seed=seed,
        total_env_steps=steps,
        eval_every_iters=0,
        eval_episodes=1,  # the run's last-iteration evaluation: short, and subtracted
        checkpoint_every_iters=0,
        stop_at_eval_success=None,
        stop_at_eval_return=None,
    )
    return dataclasses.replace(base, policy=policy, trainer=trainer)


def sb3_settings(cfg: ExperimentConfig) -> dict[str, Any]:
    """SB3 PPO arguments with `cfg`'s settings (the policy's and the algorithm's)."""
    from benchmarks.sb3_vec_env import EncoderExtractor
    from rlcore.policies import ACTIVATIONS

    algo, policy = cfg.algo, cfg.policy
    if cfg.algorithm != "ppo" or algo.lr_schedule not in ("constant", "linear"):
        raise SystemExit(f"no SB3 equivalent of {cfg.algorithm} with lr {algo.lr_schedule}")
    if algo.normalize_reward:
        raise SystemExit("ppo.normalize_reward: use VecNormalize(norm_reward=True) on SB3's side")
    lr = algo.lr
    rollout = cfg.env.num_envs * cfg.trainer.num_steps
    hidden = list(policy.hidden_sizes)
    return {
        "learning_rate": lr if algo.lr_schedule == "constant" else (lambda left: left * lr),
        "n_steps": cfg.trainer.num_steps,
        "batch_size": rollout // algo.num_minibatches,
        "n_epochs": algo.num_epochs,
        "gamma": algo.gamma,
        "gae_lambda": algo.gae_lambda,
        "clip_range": algo.clip_eps,
        "clip_range_vf": algo.clip_value_eps,
        "normalize_advantage": algo.normalize_advantage,
        "ent_coef": algo.ent_coef,
        "vf_coef": algo.vf_coef,
        "max_grad_norm": algo.max_grad_norm if algo.max_grad_norm is not None else float("inf"),
        "target_kl": algo.target_kl,
        "policy_kwargs": {
            "net_arch": {"pi": hidden, "vf": hidden},
            "activation_fn": ACTIVATIONS[policy.activation],
            "log_std_init": policy.init_log_std,
            "share_features_extractor": False,
            "features_extractor_class": EncoderExtractor,
            "features_extractor_kwargs": {"keys": READS, "policy": policy},
            "optimizer_kwargs": {"eps": algo.adam_eps},
        },
    }


def parameters(module: torch.nn.Module) -> int:
    """Trainable parameters: the two sides' networks should count the same."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def run_ours(steps: int, seed: int) -> dict[str, Any]:
    """Build and train our PPO for `steps` env steps; times without the final evaluation."""
    times = {"collect_s": 0.0, "update_s": 0.0, "eval_s": 0.0}
    last: dict[str, float] = {}

    def sink(step: int, metrics: dict[str, float]) -> None:
        for key in times:
            times[key] += metrics.get(f"time/{key}", 0.0)
        if "train/episode_return" in metrics:
            last["return"] = metrics["train/episode_return"]

    start = time.perf_counter()
    trainer = Trainer(our_config(steps, seed), sink=sink)
    build = time.perf_counter() - start
    start = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - start - times["eval_s"]
    trainer.env.close()
    if trainer.eval_env is not None:
        trainer.eval_env.close()
    return {
        "impl": "rlcore", "params": parameters(trainer.policy), "env_steps": trainer.env_steps,
        "build_s": build, "wall_s": wall,
        "collect_s": times["collect_s"], "update_s": times["update_s"],
        "train_return": last.get("return", float("nan")),
    }  # fmt: skip


def run_sb3(steps: int, seed: int) -> dict[str, Any]:
    """Build and train SB3's PPO (MultiInputPolicy) for `steps` env steps on the same env."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecNormalize

    from benchmarks.sb3_vec_env import BatchedVecEnv

    class CollectTimer(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.collect_s, self.started = 0.0, 0.0

        def _on_rollout_start(self) -> None:
            self.started = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.collect_s += time.perf_counter() - self.started

        def _on_step(self) -> bool:
            return True

    cfg = our_config(steps, seed)
    start = time.perf_counter()
    venv = BatchedVecEnv(make_env(cfg.env), keys=READS, reward_scale=cfg.algo.reward_scale)
    venv.seed(seed)
    if cfg.policy.normalize_obs:
        vectors = [key for key in READS if len(venv.observation_space[key].shape) == 1]
        venv = VecNormalize(venv, norm_obs=True, norm_reward=False, norm_obs_keys=vectors)
    model = PPO("MultiInputPolicy", venv, device="cpu", seed=seed, verbose=0, **sb3_settings(cfg))
    build = time.perf_counter() - start
    timer = CollectTimer()
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=timer)
    wall = time.perf_counter() - start
    returns = [info["r"] for info in model.ep_info_buffer or []]
    venv.close()
    return {
        "impl": "sb3", "params": parameters(model.policy), "env_steps": int(model.num_timesteps),
        "build_s": build, "wall_s": wall,
        "collect_s": timer.collect_s, "update_s": wall - timer.collect_s,
        "train_return": statistics.fmean(returns) if returns else float("nan"),
    }  # fmt: skip


def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print(f"note: stable-baselines3 is not installed; nothing to compare ({SB3_INSTALL_HINT})")
        return False
    return True


def per_step(row: dict[str, Any]) -> dict[str, Any]:
    steps = row["env_steps"]
    return row | {
        "us_per_step": 1e6 * row["wall_s"] / steps,
        "collect_us": 1e6 * row["collect_s"] / steps,
        "update_us": 1e6 * row["update_s"] / steps,
        "sps": steps / row["wall_s"],
    }


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"impl": rows[0]["impl"], "rep": "median", "params": rows[0]["params"]}
    for key in ("env_steps", "build_s", "wall_s", "us_per_step", "collect_us", "update_us",
                "sps", "train_return"):  # fmt: skip
        out[key] = statistics.median(r[key] for r in rows)
    return out


COLUMNS: list[tuple[str, str, str]] = [
    ("impl", "impl", ""),
    ("rep", "rep", ""),
    ("params", "params", ",d"),
    ("env_steps", "env steps", ",d"),
    ("build_s", "build s", ".2f"),
    ("wall_s", "train s", ".2f"),
    ("us_per_step", "us/env step", ".1f"),
    ("collect_us", "collect us", ".1f"),
    ("update_us", "update us", ".1f"),
    ("sps", "env steps/s", ",.0f"),
    ("train_return", "train return", ".1f"),
]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.set_defaults(reps=3)
    base = PRESETS[TASK]
    per_iter = base.env.num_envs * base.trainer.num_steps
    parser.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_ITERS * per_iter,
        help=f"env steps per timed run, a multiple of {per_iter} "
        f"(default {DEFAULT_ITERS * per_iter:,})",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps <= 0 or args.steps % per_iter:
        raise SystemExit(f"--steps must be a positive multiple of {per_iter}, got {args.steps}")
    meta = setup(
        args,
        "PPO from pixels: ours vs SB3 MultiInputPolicy, wall time per env step",
        method=f"medians of {args.reps} repetitions after one untimed iteration each; each "
        "repetition trains both from scratch back to back (ours first, reversed every other)",
    )
    if not sb3_available():
        write_json(args.json, meta, {"runs": [], "comparison": {}})
        return
    print(
        f"{TASK}: {base.env.num_envs} envs x {base.trainer.num_steps} steps x "
        f"{args.steps // per_iter} iterations = {args.steps:,} env steps per run; actor and "
        f"critic read {' + '.join(READS)} on both sides"
    )
    print("... warm-up (one iteration each, untimed)", flush=True)
    run_ours(per_iter, args.seed)
    run_sb3(per_iter, args.seed)
    threads = torch.get_num_threads()
    runs: dict[str, list[dict[str, Any]]] = {"rlcore": [], "sb3": []}
    order = [("rlcore", run_ours), ("sb3", run_sb3)]
    for rep in range(args.reps):
        for name, fn in order if rep % 2 == 0 else order[::-1]:
            print(f"... rep {rep} {name}", flush=True)
            row = per_step(fn(args.steps, args.seed)) | {"rep": rep}
            runs[name].append(row)
            print(
                f"    {row['wall_s']:.2f} s, {row['us_per_step']:.1f} us/env step "
                f"(collect {row['collect_us']:.1f}, update {row['update_us']:.1f})",
                flush=True,
            )
    if torch.get_num_threads() != threads:
        print(f"note: torch threads changed to {torch.get_num_threads()} during the runs")
    rows = [*runs["rlcore"], median_row(runs["rlcore"]), *runs["sb3"], median_row(runs["sb3"])]
    print()
    print_table(rows, COLUMNS)
    ours, sb3 = median_row(runs["rlcore"]), median_row(runs["sb3"])
    ratio = ours["us_per_step"] / sb3["us_per_step"]
    paired = statistics.median(
        a["us_per_step"] / b["us_per_step"]
        for a, b in zip(runs["rlcore"], runs["sb3"], strict=True)
    )
    comparison = {
        "ours_over_sb3_wall_per_env_step": ratio,
        "paired_median_ratio": paired,
        "collect_ratio": ours["collect_us"] / sb3["collect_us"],
        "update_ratio": ours["update_us"] / sb3["update_us"],
        "target": f"<= {TARGET_RATIO}",
        "verdict": verdict(ratio, TARGET_RATIO, higher_is_better=False),
    }
    print()
    print(
        f"wall time per env step, ours / SB3 (medians): {ratio:.3f} "
        f"(target <= {TARGET_RATIO}: {comparison['verdict']}); median of per-repetition "
        f"ratios {paired:.3f}; collection {comparison['collect_ratio']:.3f}, "
        f"update {comparison['update_ratio']:.3f}"
    )
    write_json(args.json, meta, {"runs": rows, "comparison": comparison})


if __name__ == "__main__":
    main()
