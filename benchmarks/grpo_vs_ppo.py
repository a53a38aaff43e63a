"""GRPO against PPO on the same env-step budget and seeds: final score, wall time, steps.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.grpo_vs_ppo
    .venv/bin/python -m benchmarks.grpo_vs_ppo --tasks cartpole --seeds 0 1

Every (task, variant, seed) is one `Trainer.run()` of the variant's preset
(`rlcore.presets.preset(task, algorithm)`) with the benchmark's env-step budget, no early
stop, and a deterministic evaluation about every `--eval-interval` env steps. Variants:

- `ppo`: the PPO preset;
- `grpo`: the GRPO preset, `episode_mode: restart_groups` (a group is re-reset together
  once all its members are done);
- `grpo-first`: the same with the seed's `first_done` mode (only each env's first episode of
  a rollout reaches the loss);
- `grpo-compiled`, `ppo-compiled` (not in the default variants): `grpo`, `ppo` with
  `runtime.compile` (whole compiled minibatch steps; compiling counts in the wall time).

Reported per run: the final evaluation (`eval/episode_return`, and `eval/success_rate` where
the task has one), wall time with and without evaluation (`time/eval_s`), the env steps at
the first evaluation that reached the task's threshold (`-` if none did), and for GRPO the
mean fraction of collected steps that reached the loss (`stats/loss_fraction`). Medians over
seeds follow. Seeds are runs, so `--reps` is unused here.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.config import ExperimentConfig
from rlcore.presets import preset
from rlcore.trainer import Trainer

# task -> (metric, threshold, env-step budget)
TASKS: dict[str, tuple[str, float, int]] = {
    "cartpole": ("eval/episode_return", 475.0, 300_000),
    "push_cube": ("eval/success_rate", 0.8, 1_000_000),
}
# name -> (algorithm, GRPO episode mode, compiled)
VARIANTS: dict[str, tuple[str, str | None, bool]] = {
    "ppo": ("ppo", None, False),
    "grpo": ("grpo", "restart_groups", False),
    "grpo-first": ("grpo", "first_done", False),
    "ppo-compiled": ("ppo", None, True),
    "grpo-compiled": ("grpo", "restart_groups", True),
}
DEFAULT_VARIANTS = ["ppo", "grpo", "grpo-first"]


def variant_config(
    task: str, variant: str, seed: int, budget: int, eval_interval: int
) -> ExperimentConfig:
    """The variant's preset with `seed`, the shared budget, no early stop, evenly spaced evals."""
    algorithm, mode, _ = VARIANTS[variant]
    base = preset(task, algorithm)
    if mode is not None:
        base = dataclasses.replace(base, algo=dataclasses.replace(base.algo, episode_mode=mode))
    every = max(1, round(eval_interval / base.steps_per_iter))
    trainer = dataclasses.replace(
        base.trainer,
        seed=seed,
        total_env_steps=budget,
        eval_every_iters=every,
        stop_at_eval_return=None,
        stop_at_eval_success=None,
    )
    return dataclasses.replace(base, trainer=trainer)


def run_one(task: str, variant: str, seed: int, budget: int, interval: int) -> dict[str, Any]:
    metric, threshold, _ = TASKS[task]
    cfg = variant_config(task, variant, seed, budget, interval)
    evals: list[tuple[int, dict[str, float]]] = []
    fractions: list[float] = []

    def sink(step: int, metrics: dict[str, float]) -> None:
        if metric in metrics:
            evals.append((step, metrics))
        if "stats/loss_fraction" in metrics:
            fractions.append(metrics["stats/loss_fraction"])

    start = time.perf_counter()
    result = Trainer(cfg, sink=sink, compile_loss=VARIANTS[variant][2]).run()
    wall = time.perf_counter() - start
    eval_s = sum(m.get("time/eval_s", 0.0) for _, m in evals)
    reached = [step for step, m in evals if m[metric] >= threshold]
    final = evals[-1][1]
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "env_steps": result.env_steps,
        "final_return": final["eval/episode_return"],
        "final_success": final.get("eval/success_rate"),
        "steps_to_threshold": reached[0] if reached else None,
        "wall_s": wall,
        "wall_ex_eval_s": wall - eval_s,
        "loss_fraction": statistics.fmean(fractions) if fractions else None,
    }


def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over seeds per (task, variant); steps to threshold over the runs reaching it."""
    rows = []
    for task in dict.fromkeys(r["task"] for r in runs):
        for variant in dict.fromkeys(r["variant"] for r in runs if r["task"] == task):
            group = [r for r in runs if r["task"] == task and r["variant"] == variant]
            reached = [r["steps_to_threshold"] for r in group]
            rows.append(
                {
                    "task": task,
                    "variant": variant,
                    "seeds": len(group),
                    "reached": f"{sum(s is not None for s in reached)}/{len(group)}",
                    "steps_to_threshold": median_or_none(reached),
                    "final_return": median_or_none([r["final_return"] for r in group]),
                    "final_success": median_or_none([r["final_success"] for r in group]),
                    "wall_ex_eval_s": median_or_none([r["wall_ex_eval_s"] for r in group]),
                    "loss_fraction": median_or_none([r["loss_fraction"] for r in group]),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--eval-interval", type=int, default=16_384, help="env steps")
    parser.add_argument(
        "--budget-scale", type=float, default=1.0, help="multiply every task's env-step budget"
    )
    args = parser.parse_args(argv)
    if args.budget_scale <= 0:
        raise SystemExit(f"--budget-scale must be > 0, got {args.budget_scale}")
    meta = setup(args, "GRPO vs PPO, same env-step budget and seeds", method="one run per seed")
    runs = []
    for task in args.tasks:
        metric, threshold, budget = TASKS[task]
        budget = int(budget * args.budget_scale)
        print(f"{task}: budget {budget:,} env steps; threshold {metric} >= {threshold}")
        for variant in args.variants:
            for seed in args.seeds:
                print(f"... {task} {variant} seed {seed}", flush=True)
                runs.append(run_one(task, variant, seed, budget, args.eval_interval))
    columns = [
        ("task", "task", ""),
        ("variant", "variant", ""),
        ("seed", "seed", "d"),
        ("final_return", "final return", ".1f"),
        ("final_success", "final success", ".2f"),
        ("steps_to_threshold", "steps to threshold", ",d"),
        ("wall_ex_eval_s", "wall s (no eval)", ".1f"),
        ("loss_fraction", "steps in loss", ".2f"),
    ]
    print()
    print_table(runs, columns)
    summary = summarize(runs)
    print()
    print("medians over seeds (steps to threshold: over the seeds that reached it):")
    print_table(
        summary,
        [
            ("task", "task", ""),
            ("variant", "variant", ""),
            ("reached", "reached", ""),
            ("steps_to_threshold", "steps to threshold", ",.0f"),
            ("final_return", "final return", ".1f"),
            ("final_success", "final success", ".2f"),
            ("wall_ex_eval_s", "wall s (no eval)", ".1f"),
            ("loss_fraction", "steps in loss", ".2f"),
        ],
    )
    write_json(args.json, meta, {"runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
