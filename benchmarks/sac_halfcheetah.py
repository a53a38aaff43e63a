"""SAC on HalfCheetah: evaluation return and wall time at a budget, ours vs SB3 (RL Zoo).

Run from the repository root (needs the `mujoco` and `bench` extras):

    .venv/bin/python -m benchmarks.sac_halfcheetah                       # 300k steps, 3 seeds
    .venv/bin/python -m benchmarks.sac_halfcheetah --steps 20000 --seeds 0
    .venv/bin/python -m benchmarks.sac_halfcheetah --impls native --precision bfloat16

Per seed, taking turns: `SAC_PRESETS["mujoco_halfcheetah"]` (native batched MuJoCo),
`SAC_PRESETS["gym_halfcheetah"]` (Gymnasium HalfCheetah-v5 through the bridge) and
Stable-Baselines3 SAC with RL Zoo's HalfCheetah settings (learning_starts 10,000, SB3's
defaults otherwise: 256x256, lr 3e-4, batch 256, buffer 1M, one gradient step per env step)
on HalfCheetah-v5, each for `--steps` env steps, then 10 deterministic evaluation episodes
(ours on the trainer's evaluation env, SB3's with `evaluate_policy`). Prints the return and
the wall time (evaluation excluded) and the ratio of wall times to SB3's (target <= 0.5 with
a return >= SB3's at 300k steps). `--precision` sets our SAC's `algorithm.sac.precision`
(bfloat16: the hidden layers' matrix products in bf16; the presets' `auto` takes bf16 where
the CPU has it natively);
`--num-envs` and `--num-steps` our envs and steps per iteration (the presets': 1 x 1, SB3's
scheme; 4 x 4 reached a lower return at 300k, see benchmarks/README.md). `--hidden`, `--lr`,
`--tau` and `--updates-per-step` replace the presets' (the SAC study's trial 37: 400x300, an
update every second env step); `--rl-zoo` runs ours with RL Zoo's values of those four, as
SB3 runs. `--curve-every N` also evaluates ours every N env steps and prints each point as it
comes (for 1M-step runs). `--impls native-compiled` (or `gym-compiled`) runs ours with the
update compiled, as `runtime.compile: true` has it.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any

from benchmarks.common import base_parser, hidden_sizes, print_table, setup, write_json
from rlcore.config import ExperimentConfig
from rlcore.presets import SAC_PRESETS
from rlcore.trainer import Trainer

EVAL_EPISODES = 10


def run_ours(
    impl: str,
    base: ExperimentConfig,
    seed: int,
    steps: int,
    curve_every: int = 0,
    compiled: bool = False,
) -> dict[str, Any]:
    """Train one seed; with `curve_every` > 0 also evaluate every that many env steps and
    print each point as it comes (so a long run shows its curve before it ends); `compiled`:
    the update compiled, as `runtime.compile: true` has it."""
    per_iter = base.env.num_envs * base.trainer.num_steps
    tc = dataclasses.replace(
        base.trainer, seed=seed, total_env_steps=steps,
        eval_every_iters=max(1, curve_every // per_iter) if curve_every > 0 else 0,
        eval_episodes=EVAL_EPISODES,
    )  # fmt: skip
    cfg = dataclasses.replace(base, trainer=tc)
    eval_s = [0.0]

    def sink(step: int, metrics: dict[str, float]) -> None:
        eval_s[0] += metrics.get("time/eval_s", 0.0)
        if curve_every > 0 and "eval/episode_return" in metrics:
            wall = time.perf_counter() - start - eval_s[0]
            ret = metrics["eval/episode_return"]
            print(f"  {impl} seed {seed}: {step:,d} env steps, eval return {ret:.1f}, "
                  f"wall-eval {wall:.1f} s", flush=True)  # fmt: skip

    start = time.perf_counter()
    trainer = Trainer(cfg, sink=sink, compile_loss=compiled)
    result = trainer.run()
    wall = time.perf_counter() - start - eval_s[0]
    trainer.env.close()
    if trainer.eval_env is not None:
        trainer.eval_env.close()
    return row(impl, seed, result.env_steps, result.eval_metrics["eval/episode_return"], wall)


def run_sb3(seed: int, steps: int) -> dict[str, Any]:
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    start = time.perf_counter()
    env = make_vec_env("HalfCheetah-v5", n_envs=1, seed=seed)
    model = SAC("MlpPolicy", env, learning_starts=10_000, device="cpu", seed=seed, verbose=0)
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    eval_env = make_vec_env("HalfCheetah-v5", n_envs=1, seed=seed + 10_000)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    env.close()
    eval_env.close()
    return row("sb3", seed, int(model.num_timesteps), float(mean), wall)


def row(impl: str, seed: Any, steps: int, ret: float, wall: float) -> dict[str, Any]:
    return {"impl": impl, "seed": seed, "env_steps": steps, "return": ret, "wall_s": wall}


COLUMNS = [
    ("impl", "impl", ""),
    ("seed", "seed", ""),
    ("env_steps", "env steps", ",d"),
    ("return", "eval return", ".1f"),
    ("wall_s", "wall-eval s", ".1f"),
]


# RL Zoo's HalfCheetah SAC where it differs from our presets (SB3's defaults; `--rl-zoo`).
RL_ZOO_SETTINGS = {"hidden": (256, 256), "lr": 3e-4, "tau": 0.005, "updates_per_step": 1.0}


def with_overrides(cfg: ExperimentConfig, args: argparse.Namespace) -> ExperimentConfig:
    """The preset with the settings a search trial varies (`--hidden`, `--lr`, `--tau`,
    `--updates-per-step`) replaced where given."""
    algo = {k: v for k, v in (("lr", args.lr), ("tau", args.tau)) if v is not None}
    policy = {"hidden_sizes": args.hidden} if args.hidden is not None else {}
    replay = {}
    if args.updates_per_step is not None:
        replay["updates_per_step"] = args.updates_per_step
    return dataclasses.replace(
        cfg,
        algo=dataclasses.replace(cfg.algo, **algo),
        policy=dataclasses.replace(cfg.policy, **policy),
        replay=dataclasses.replace(cfg.replay, **replay),
    )


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument(
        "--impls", nargs="+", default=["native", "gym", "sb3"],
        choices=["native", "gym", "sb3", "native-compiled", "gym-compiled"],
        help="`-compiled`: ours with the update compiled (runtime.compile: true)",
    )  # fmt: skip
    parser.add_argument("--precision", choices=["float32", "bfloat16", "auto"], default=None)
    parser.add_argument("--num-envs", type=int, default=None, help="ours: env.num_envs")
    parser.add_argument("--num-steps", type=int, default=None, help="ours: trainer.num_steps")
    parser.add_argument("--hidden", type=hidden_sizes, default=None, help="ours: e.g. 400x300")
    parser.add_argument("--lr", type=float, default=None, help="ours: algorithm.sac.lr")
    parser.add_argument("--tau", type=float, default=None, help="ours: algorithm.sac.tau")
    parser.add_argument(
        "--updates-per-step", type=float, default=None, help="ours: replay.updates_per_step"
    )
    parser.add_argument(
        "--rl-zoo", action="store_true",
        help="ours with RL Zoo's settings (256x256, lr 3e-4, tau 0.005, an update per env "
        "step: the presets' until 2026-11-25) where --hidden, --lr, --tau, --updates-per-step "
        "are not given",
    )  # fmt: skip
    parser.add_argument(
        "--curve-every", type=int, default=0,
        help="ours: also evaluate every this many env steps and print the curve as it goes",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.rl_zoo:
        for key, value in RL_ZOO_SETTINGS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    meta = setup(
        args,
        f"SAC HalfCheetah: return and wall time at {args.steps:,d} env steps",
        method=f"one run per implementation and seed (seeds {args.seeds}), taking turns; "
        f"means and medians over seeds (--reps unused); precision {args.precision or 'preset'}; "
        f"num_envs x num_steps {args.num_envs or 'preset'} x {args.num_steps or 'preset'}; "
        f"hidden {args.hidden or 'preset'}, lr {args.lr or 'preset'}, tau {args.tau or 'preset'}, "
        f"updates per step {args.updates_per_step or 'preset'}",
    )
    presets = {"native": SAC_PRESETS["mujoco_halfcheetah"], "gym": SAC_PRESETS["gym_halfcheetah"]}
    if args.precision is not None:
        presets = {
            impl: dataclasses.replace(
                cfg, algo=dataclasses.replace(cfg.algo, precision=args.precision)
            )
            for impl, cfg in presets.items()
        }
    if args.num_envs is not None or args.num_steps is not None:
        presets = {
            impl: dataclasses.replace(
                cfg,
                env=dataclasses.replace(cfg.env, num_envs=args.num_envs or cfg.env.num_envs),
                trainer=dataclasses.replace(
                    cfg.trainer, num_steps=args.num_steps or cfg.trainer.num_steps
                ),
            )
            for impl, cfg in presets.items()
        }
    presets = {impl: with_overrides(cfg, args) for impl, cfg in presets.items()}
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in args.impls}
    for seed in args.seeds:
        order = args.impls if seed % 2 == 0 else args.impls[::-1]
        for impl in order:
            if impl == "sb3":
                result = run_sb3(seed, args.steps)
            else:
                base = impl.removesuffix("-compiled")  # `native-compiled`: runtime.compile
                result = run_ours(
                    impl, presets[base], seed, args.steps, args.curve_every,
                    compiled=impl != base,
                )  # fmt: skip
            runs[impl].append(result)
            print_table([result], COLUMNS)
    summary = []
    for impl, rows in runs.items():
        returns = [r["return"] for r in rows]
        summary.append(
            {
                "impl": impl,
                "seed": "mean",
                "env_steps": rows[0]["env_steps"],
                "return": statistics.mean(returns),
                "wall_s": statistics.median(r["wall_s"] for r in rows),
            }
        )
    print()
    print_table([r for rows in runs.values() for r in rows] + summary, COLUMNS)
    by_impl = {r["impl"]: r for r in summary}
    if "sb3" in by_impl:
        for impl in args.impls:
            if impl != "sb3":
                ours, sb3 = by_impl[impl], by_impl["sb3"]
                ratio = ours["wall_s"] / sb3["wall_s"]
                print(
                    f"{impl} / sb3 wall-eval (medians): {ratio:.3f}; mean return "
                    f"{ours['return']:.1f} vs {sb3['return']:.1f}"
                )
    write_json(args.json, meta, {"runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
