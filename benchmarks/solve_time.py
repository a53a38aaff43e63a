"""Wall time and env steps until each builtin task is solved, ours vs Stable-Baselines3.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.solve_time
    .venv/bin/python -m benchmarks.solve_time --tasks cartpole --seeds 0

For every task with a preset in `rlcore.presets.PRESETS` (cartpole, pendulum, push_cube, and
gym_cartpole: Gymnasium's CartPole-v1 through rlcore's Gymnasium bridge) and
every seed, `Trainer(cfg).run()` is timed wall-clock from construction to return, with
`cfg` = the preset with `trainer.seed` replaced. The Trainer stops at the preset's
`stop_at_eval_*` target (added from TARGETS when a preset has none). Evaluation runs inside
`run()`; its time is the Trainer's own `time/eval_s` metric, summed, and wall time is
reported both with and without it.

For cartpole, Stable-Baselines3 PPO with RL Zoo's tuned CartPole-v1 hyperparameters runs in
the same invocation on Gymnasium CartPole-v1 (8 envs, `device="cpu"`, same torch threads).
A callback evaluates 16 deterministic episodes every 1024 env steps on a separate
16-env CartPole-v1 (seeded identically each time) and stops when the mean return is >= 475;
the evaluation time is measured and subtracted. The ratio ours / SB3 compares the medians
of wall time excluding evaluation (target <= 0.2 for the builtin cartpole; <= 0.5 for
gym_cartpole, the same Gymnasium env SB3 trains on, whose ratio is also split into env
steps to solve and wall time per env step).

Each seed is one run and medians are over seeds, so `--reps` is unused here.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.common import base_parser, preset_or_note, print_table, setup, verdict, write_json
from rlcore.config import ExperimentConfig
from rlcore.trainer import Trainer

# task -> (metric reported by rlcore.evaluate, threshold); the benchmark's definition of solved
TARGETS: dict[str, tuple[str, float]] = {
    "cartpole": ("eval/episode_return", 475.0),
    "gym_cartpole": ("eval/episode_return", 475.0),
    "pendulum": ("eval/episode_return", -250.0),
    "push_cube": ("eval/success_rate", 0.9),
}
TARGET_RATIO = 0.2
GYM_TARGET_RATIO = 0.5  # issue 24: Gymnasium CartPole-v1, wall time <= 0.5x SB3's
SB3_EVAL_EVERY = 1024
SB3_EVAL_EPISODES = 16
SB3_TOTAL_STEPS = 100_000
SB3_INSTALL_HINT = 'pip install -e ".[bench]"'


@dataclass
class SolveRun:
    impl: str
    task: str
    seed: int
    wall_s: float
    eval_s: float
    env_steps: int
    metric: str
    final_metric: float
    reached: bool

    @property
    def wall_ex_eval_s(self) -> float:
        return self.wall_s - self.eval_s

    def row(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"wall_ex_eval_s": self.wall_ex_eval_s}


def solve_config(
    base: ExperimentConfig, task: str, seed: int, quiet: bool = False
) -> ExperimentConfig:
    """The preset with `seed`, stopping at the benchmark target if the preset has none."""
    tc = dataclasses.replace(base.trainer, seed=seed)
    metric, threshold = TARGETS[task]
    preset_target = (
        tc.stop_at_eval_success if metric == "eval/success_rate" else tc.stop_at_eval_return
    )
    if preset_target is not None and preset_target != threshold and not quiet:
        print(f"note: {task} preset stops at {metric} >= {preset_target}, not {threshold}")
    if tc.stop_at_eval_return is None and tc.stop_at_eval_success is None:
        if metric == "eval/success_rate":
            tc = dataclasses.replace(tc, stop_at_eval_success=threshold)
        else:
            tc = dataclasses.replace(tc, stop_at_eval_return=threshold)
    return dataclasses.replace(base, trainer=tc)


def run_ours(base: ExperimentConfig, task: str, seed: int, compiled: bool = False) -> SolveRun:
    cfg = solve_config(base, task, seed)
    metric, threshold = TARGETS[task]
    eval_s = [0.0]

    def sink(step: int, metrics: dict[str, float]) -> None:
        eval_s[0] += metrics.get("time/eval_s", 0.0)

    start = time.perf_counter()
    trainer = Trainer(cfg, sink=sink, compile_loss=compiled)
    result = trainer.run()
    wall = time.perf_counter() - start
    final = result.eval_metrics.get(metric, float("nan"))
    impl = "rlcore" if cfg.algorithm == "ppo" else f"rlcore-{cfg.algorithm}"
    impl += "-compiled" if compiled else ""
    return SolveRun(
        impl, task, seed, wall, eval_s[0], result.env_steps, metric, final, final >= threshold,
    )  # fmt: skip


def warm_up_ours(base: ExperimentConfig, task: str, compiled: bool = False) -> None:
    """One untimed iteration and evaluation: first-call costs (compiling, with `compiled`:
    each later run compiles again from torch's on-disk cache) stay out of the timed runs."""
    cfg = solve_config(base, task, seed=0, quiet=True)
    cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, eval_every_iters=1))
    Trainer(cfg, compile_loss=compiled).run(max_iters=1)


def run_sb3(
    seed: int, total_steps: int = SB3_TOTAL_STEPS, eval_every: int = SB3_EVAL_EVERY
) -> SolveRun:
    """SB3 PPO with RL Zoo's CartPole-v1 hyperparameters until the eval return is >= 475."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    metric, threshold = TARGETS["cartpole"]

    def linear(initial: float) -> Any:
        # RL Zoo's `lin_<x>`: decays linearly from x to 0 with the remaining progress.
        return lambda progress_remaining: progress_remaining * initial

    class EvalStop(BaseCallback):
        def __init__(self, eval_env: Any) -> None:
            super().__init__()
            self.eval_env = eval_env
            self.next_eval = eval_every
            self.eval_s = 0.0
            self.last_return = float("nan")
            self.last_eval_step = -1

        def evaluate(self) -> float:
            start = time.perf_counter()
            self.eval_env.seed(seed + 10_000)  # the same start states every time, like ours
            mean, _ = evaluate_policy(
                self.model, self.eval_env, n_eval_episodes=SB3_EVAL_EPISODES, deterministic=True
            )
            self.eval_s += time.perf_counter() - start
            self.last_return, self.last_eval_step = float(mean), self.num_timesteps
            return self.last_return

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            return self.evaluate() < threshold

    start = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=SB3_EVAL_EPISODES, seed=seed + 10_000)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        device="cpu",
        seed=seed,
        verbose=0,
    )
    callback = EvalStop(eval_env)
    model.learn(total_timesteps=total_steps, callback=callback)
    if callback.last_eval_step != model.num_timesteps:
        callback.evaluate()  # the budget ran out: score the final policy, as ours does
    wall = time.perf_counter() - start
    env.close()
    eval_env.close()
    final = callback.last_return
    return SolveRun(
        "sb3", "cartpole", seed, wall, callback.eval_s, int(model.num_timesteps), metric, final,
        final >= threshold,
    )  # fmt: skip


def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print(f"note: stable-baselines3 is not installed; skipping SB3 ({SB3_INSTALL_HINT})")
        return False
    return True


def wall_per_env_step(runs: list[SolveRun]) -> float:
    """Seconds of training (evaluation excluded) per env step, over all the runs: the cost
    side of time-to-solve, apart from the sample efficiency that env steps measure."""
    return sum(r.wall_ex_eval_s for r in runs) / sum(r.env_steps for r in runs)


def median_row(runs: list[SolveRun]) -> dict[str, Any]:
    first = runs[0]
    return {
        "impl": first.impl,
        "task": first.task,
        "seed": "median",
        "wall_s": statistics.median(r.wall_s for r in runs),
        "eval_s": statistics.median(r.eval_s for r in runs),
        "wall_ex_eval_s": statistics.median(r.wall_ex_eval_s for r in runs),
        "env_steps": int(statistics.median(r.env_steps for r in runs)),
        "metric": first.metric,
        "final_metric": statistics.median(r.final_metric for r in runs),
        "reached": f"{sum(r.reached for r in runs)}/{len(runs)}",
    }


COLUMNS: list[tuple[str, str, str]] = [
    ("impl", "impl", ""),
    ("task", "task", ""),
    ("seed", "seed", ""),
    ("wall_s", "wall s", ".2f"),
    ("eval_s", "eval s", ".2f"),
    ("wall_ex_eval_s", "wall-eval s", ".2f"),
    ("env_steps", "env steps", ",d"),
    ("metric", "metric", ""),
    ("final_metric", "final", ".3f"),
    ("reached", "solved", ""),
]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks", nargs="+", default=["cartpole", "pendulum", "push_cube"], choices=list(TARGETS)
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--no-sb3", action="store_true", help="skip the SB3 cartpole baseline")
    parser.add_argument(
        "--compile", action="store_true",
        help="also run each task with runtime.compile, side by side (ratios printed)",
    )  # fmt: skip
    parser.add_argument(
        "--algorithm",
        choices=("ppo", "grpo"),
        default="ppo",
        help="which rlcore presets to run (grpo: rlcore.presets.GRPO_PRESETS; no SB3 baseline)",
    )
    args = parser.parse_args(argv)
    meta = setup(
        args,
        "time to solve (wall clock and env steps)",
        method=f"one timed run per seed (seeds {args.seeds}) after an untimed warm-up run; "
        "medians over seeds (--reps unused)",
    )
    print(
        "wall s: from construction to the end of training, evaluation included; wall-eval s: "
        "evaluation excluded, timed via the metrics sink (rlcore) or around evaluate_policy "
        "(SB3). A run that never reaches its target counts with its full budget."
    )
    for task, (metric, threshold) in TARGETS.items():
        if task in args.tasks:
            print(f"target {task}: {metric} >= {threshold}")
    rows: list[dict[str, Any]] = []
    medians: dict[tuple[str, str], dict[str, Any]] = {}
    runs_of: dict[tuple[str, str], list[SolveRun]] = {}
    groups: list[tuple[str, str]] = []
    for task in args.tasks:
        groups += [(task, "rlcore")] + ([(task, "rlcore-compiled")] if args.compile else [])
    with_sb3 = args.algorithm == "ppo" and not args.no_sb3
    cartpoles = [t for t in ("cartpole", "gym_cartpole") if t in args.tasks]
    if cartpoles and with_sb3 and sb3_available():
        groups.insert(groups.index((cartpoles[-1], "rlcore")) + 1, ("cartpole", "sb3"))
    for task, impl in groups:
        base, compiled = None, impl == "rlcore-compiled"
        if impl.startswith("rlcore"):
            base = preset_or_note(task, f"solve time of {task}", args.algorithm)
            if base is None:
                continue
        print(f"... {impl} {task} warm-up (untimed)", flush=True)
        if base is None:
            run_sb3(args.seeds[0], total_steps=512, eval_every=256)
        else:
            warm_up_ours(base, task, compiled)
        runs = []
        for seed in args.seeds:
            print(f"... {impl} {task} seed {seed}", flush=True)
            run = run_sb3(seed) if base is None else run_ours(base, task, seed, compiled)
            runs.append(run)
            rows.append(run.row())
            print(
                f"    wall {run.wall_s:.2f} s (eval {run.eval_s:.2f} s), "
                f"{run.env_steps:,} env steps, {run.metric} {run.final_metric:.3f}",
                flush=True,
            )
        medians[(task, impl)] = median_row(runs)
        runs_of[(task, impl)] = runs
        rows.append(medians[(task, impl)])
    print()
    print_table(rows, COLUMNS)
    comparison: dict[str, Any] = {}
    for task in args.tasks:
        eager, fast = medians.get((task, "rlcore")), medians.get((task, "rlcore-compiled"))
        if eager is None or fast is None:
            continue
        wall = fast["wall_ex_eval_s"] / eager["wall_ex_eval_s"]
        steps = fast["env_steps"] / eager["env_steps"]
        comparison[f"{task}_compiled_over_eager_wall_ex_eval"] = wall
        print(
            f"{task}: runtime.compile / eager, median wall time to the target (evaluation "
            f"excluded) {wall:.3f}, median env steps {steps:.3f}"
        )
    sb3 = medians.get(("cartpole", "sb3"))
    gym = medians.get(("gym_cartpole", "rlcore"))
    if gym is not None and sb3 is not None:
        gym_ratio = gym["wall_ex_eval_s"] / sb3["wall_ex_eval_s"]
        steps_ratio = gym["env_steps"] / sb3["env_steps"]
        per_step_ratio = wall_per_env_step(runs_of[("gym_cartpole", "rlcore")]) / (
            wall_per_env_step(runs_of[("cartpole", "sb3")])
        )
        comparison |= {
            "gym_cartpole_ours_over_sb3_wall_ex_eval": gym_ratio,
            "gym_cartpole_ours_over_sb3_env_steps": steps_ratio,
            "gym_cartpole_ours_over_sb3_wall_per_env_step": per_step_ratio,
        }
        print()
        print(
            f"Gymnasium CartPole-v1 median wall time, ours (bridge) / SB3, evaluation excluded: "
            f"{gym_ratio:.3f} (target <= {GYM_TARGET_RATIO}: "
            f"{verdict(gym_ratio, GYM_TARGET_RATIO, higher_is_better=False)}); "
            f"evaluation included: {gym['wall_s'] / sb3['wall_s']:.3f}"
        )
        print(
            f"  = median env steps to solve {steps_ratio:.3f}x SB3's (target <= 2: "
            f"{verdict(steps_ratio, 2.0, higher_is_better=False)}), at {per_step_ratio:.3f}x its "
            f"wall time per env step (all seeds' wall time, evaluation excluded, over their "
            f"env steps). Env steps to solve swing several-fold between seeds: read the "
            f"median over 10 seeds or more."
        )
    ours = medians.get(("cartpole", "rlcore"))
    if ours is not None and sb3 is not None:
        ratio = ours["wall_ex_eval_s"] / sb3["wall_ex_eval_s"]
        ratio_incl = ours["wall_s"] / sb3["wall_s"]
        comparison |= {
            "cartpole_ours_over_sb3_wall_ex_eval": ratio,
            "cartpole_ours_over_sb3_wall_incl_eval": ratio_incl,
            "target": f"<= {TARGET_RATIO}",
            "verdict": verdict(ratio, TARGET_RATIO, higher_is_better=False),
        }
        print()
        print(
            f"cartpole median wall time ours / SB3, evaluation excluded: {ratio:.3f} "
            f"(target <= {TARGET_RATIO}: {comparison['verdict']}); "
            f"evaluation included: {ratio_incl:.3f}"
        )
        unsolved = [
            f"{key[1]} {key[0]} ({row['reached']})"
            for key, row in medians.items()
            if key in (("cartpole", "rlcore"), ("cartpole", "sb3"))
            and row["reached"].split("/")[0] != row["reached"].split("/")[1]
        ]
        if unsolved:
            print(
                f"note: medians include runs that did not reach the target, counted with "
                f"their full budget: {', '.join(unsolved)} solved."
            )
    write_json(args.json, meta, {"runs": rows, "comparison": comparison})


if __name__ == "__main__":
    main()
