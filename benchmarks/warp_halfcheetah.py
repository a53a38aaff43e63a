"""Native HalfCheetah on MuJoCo Warp (`cuda_halfcheetah`), trained for a wall-clock budget.

Issue P19's GPU line: evaluation return >= 5,000 within 5 minutes of training on one GPU.
Trains the `cuda_halfcheetah` preset (`rlcore.presets_cuda`), any setting changed by a flag,
and prints every evaluation as it comes, so a time-boxed GPU run gives its curve even when
cut short; it stops at the preset's target (return 5,000) or the budget.

    .venv/bin/python -m benchmarks.warp_halfcheetah --seconds 150 --compile   # CUDA
    .venv/bin/python -m benchmarks.warp_halfcheetah --device cpu --num-envs 16 --seconds 20

On CUDA the env is MuJoCo Warp (`engine: auto`); on the CPU, mujoco.batch (`--engine warp`
for Warp's CPU device). Wall time counts from building the trainer (Warp's kernels and
torch's compiling included) and excludes evaluation, as `benchmarks.cuda_presets` does.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from benchmarks.common import base_parser, device_arg, print_table, setup, write_json
from rlcore.config import ExperimentConfig
from rlcore.presets_cuda import CUDA_PRESETS
from rlcore.trainer import Trainer

PRESET = CUDA_PRESETS["cuda_halfcheetah"]
TARGET_RETURN = PRESET.trainer.stop_at_eval_return


def _changed(obj: Any, **changes: Any) -> Any:
    """`obj` with the changes that are not None."""
    return dataclasses.replace(obj, **{k: v for k, v in changes.items() if v is not None})


def experiment(args: Any) -> ExperimentConfig:
    """The preset on `--device`, with the flags given; a budget the wall clock ends."""
    cfg = PRESET
    options = dict(cfg.env.options) | ({} if args.engine == "auto" else {"engine": args.engine})
    env = _changed(cfg.env, device=args.device, num_envs=args.num_envs, options=options)
    hidden = tuple(args.hidden) if args.hidden else None
    policy = _changed(cfg.policy, hidden_sizes=hidden, init_log_std=args.init_log_std)
    algo = _changed(cfg.algo, lr=args.lr, gamma=args.gamma, num_epochs=args.epochs,
                    num_minibatches=args.minibatches)  # fmt: skip
    num_steps = args.num_steps or cfg.trainer.num_steps
    trainer = _changed(
        cfg.trainer, num_steps=num_steps, seed=args.seed, eval_every_iters=args.eval_every,
        eval_episodes=args.eval_episodes, total_env_steps=env.num_envs * num_steps * 100_000,
    )  # fmt: skip
    return dataclasses.replace(cfg, env=env, policy=policy, algo=algo, trainer=trainer)


def train(cfg: ExperimentConfig, seconds: float, compiled: bool) -> dict[str, Any]:
    """Train until `seconds` of training wall time (evaluation excluded) or the target."""
    curve: list[dict[str, float]] = []
    eval_s = [0.0]
    start = time.perf_counter()

    def sink(step: int, metrics: dict[str, float]) -> None:
        if "time/eval_s" not in metrics:
            return
        eval_s[0] += metrics["time/eval_s"]
        point = {
            "wall_s": time.perf_counter() - start - eval_s[0],
            "env_steps": step,
            "return": metrics.get("eval/episode_return", float("nan")),
        }
        curve.append(point)
        print(f"{point['wall_s']:7.1f} s  {step:>12,} steps  return {point['return']:9.1f}",
              flush=True)  # fmt: skip

    trainer = Trainer(cfg, sink=sink, compile_loss=compiled)
    built_s = time.perf_counter() - start
    print(f"built in {built_s:.1f} s; {trainer.steps_per_iter:,} env steps per iteration",
          flush=True)  # fmt: skip
    reached = False
    while not reached and time.perf_counter() - start - eval_s[0] < seconds:
        reached = trainer.run(max_iters=cfg.trainer.eval_every_iters).reached_target
    wall = time.perf_counter() - start - eval_s[0]
    best = max((p["return"] for p in curve), default=float("nan"))
    hit = next((p["wall_s"] for p in curve if p["return"] >= TARGET_RETURN), None)
    return {"curve": curve, "wall_s": wall, "env_steps": trainer.env_steps,
            "sps": trainer.env_steps / wall, "best_return": best, "target_wall_s": hit}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--engine", default="auto", choices=["auto", "batch", "warp"])
    parser.add_argument("--seconds", type=float, default=300.0, help="training wall budget")
    # Each None: the preset's.
    parser.add_argument("--num-envs", type=int)
    parser.add_argument("--num-steps", type=int)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--minibatches", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--gamma", type=float)
    parser.add_argument("--hidden", type=int, nargs="+")
    parser.add_argument("--init-log-std", type=float)
    parser.add_argument("--eval-every", type=int)
    parser.add_argument("--eval-episodes", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true", help="runtime.compile: true")
    args = parser.parse_args(argv)
    device_arg(args.device)
    meta = setup(args, "Warp HalfCheetah: return against training wall time")
    result = train(experiment(args), args.seconds, args.compile)
    print_table(
        [result],
        [
            ("wall_s", "training wall s", ".1f"),
            ("env_steps", "env steps", ",d"),
            ("sps", "env steps / s, building included", ",.0f"),
            ("best_return", "best evaluation return", ",.1f"),
            ("target_wall_s", f"wall s to {TARGET_RETURN:,.0f}", ".1f"),
        ],
    )
    write_json(args.json, meta, result)


if __name__ == "__main__":
    main()
