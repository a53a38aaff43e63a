"""SAC: wall time and env steps to a target return, ours vs Stable-Baselines3 (RL Zoo settings).

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.sac_solve                      # pendulum, 3 seeds
    .venv/bin/python -m benchmarks.sac_solve --seeds 0 --no-sb3

For every seed, in one invocation and on the same torch thread count:
  - rlcore: `Trainer(SAC_PRESETS["pendulum"])` on the builtin batched Pendulum, timed from
    construction to return; it evaluates 16 deterministic episodes every 800 env steps and
    stops at a mean return >= -200 (or 20k env steps);
  - rlcore-256: the same with 256x256 networks (SB3's default size), to separate the
    implementation's speed from the preset's smaller networks;
  - gym: the preset on Gymnasium's own Pendulum-v1 through rlcore's bridge;
  - sb3: Stable-Baselines3 SAC with RL Zoo's Pendulum-v1 settings (lr 1e-3, everything
    else SB3's defaults: 256x256, buffer 1M, batch 256, learning_starts 100, tau 0.005,
    one gradient step per env step, learned temperature) on Gymnasium Pendulum-v1, with a
    callback evaluating 16 deterministic episodes every 800 env steps, stopping at -200.
Evaluation time is measured and subtracted for every implementation ("wall-eval s"); the
ratio ours / SB3 compares medians over seeds of that figure (target <= 0.5).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.config import EnvConfig, ExperimentConfig
from rlcore.presets import SAC_PRESETS
from rlcore.trainer import Trainer

TARGET = -200.0
BUDGET = 20_000
EVAL_EVERY = 800
EVAL_EPISODES = 16
TARGET_RATIO = 0.5


def variants() -> dict[str, ExperimentConfig]:
    base = SAC_PRESETS["pendulum"]
    big = dataclasses.replace(
        base, policy=dataclasses.replace(base.policy, hidden_sizes=(256, 256))
    )
    gym = dataclasses.replace(base, env=EnvConfig("gymnasium:Pendulum-v1", num_envs=4))
    return {"rlcore": base, "rlcore-256": big, "gym": gym}


def run_ours(impl: str, base: ExperimentConfig, seed: int) -> dict[str, Any]:
    steps_per_eval = EVAL_EVERY // base.steps_per_iter
    trainer_cfg = dataclasses.replace(
        base.trainer,
        seed=seed,
        total_env_steps=BUDGET,
        eval_every_iters=steps_per_eval,
        eval_episodes=EVAL_EPISODES,
        stop_at_eval_return=TARGET,
    )
    cfg = dataclasses.replace(base, trainer=trainer_cfg)
    eval_s = [0.0]

    def sink(step: int, metrics: dict[str, float]) -> None:
        eval_s[0] += metrics.get("time/eval_s", 0.0)

    start = time.perf_counter()
    trainer = Trainer(cfg, sink=sink)
    result = trainer.run()
    wall = time.perf_counter() - start
    trainer.env.close()
    final = result.eval_metrics["eval/episode_return"]
    return row(impl, seed, wall, eval_s[0], result.env_steps, final)


def row(impl: str, seed: int, wall: float, eval_s: float, steps: int, final: float) -> dict:
    return {
        "impl": impl,
        "seed": seed,
        "wall_s": wall,
        "eval_s": eval_s,
        "wall_ex_eval_s": wall - eval_s,
        "env_steps": steps,
        "final": final,
        "reached": final >= TARGET,
    }


def run_sb3(seed: int) -> dict[str, Any]:
    """SB3 SAC, RL Zoo's Pendulum-v1 settings, until 16 deterministic episodes average -200."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    class EvalStop(BaseCallback):
        def __init__(self, eval_env: Any) -> None:
            super().__init__()
            self.eval_env, self.eval_s, self.last = eval_env, 0.0, float("nan")
            self.last_step = -1

        def evaluate(self) -> float:
            start = time.perf_counter()
            self.eval_env.seed(seed + 10_000)
            mean, _ = evaluate_policy(
                self.model, self.eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True
            )
            self.eval_s += time.perf_counter() - start
            self.last, self.last_step = float(mean), self.num_timesteps
            return self.last

        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY:
                return True
            return self.evaluate() < TARGET

    start = time.perf_counter()
    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    eval_env = make_vec_env("Pendulum-v1", n_envs=EVAL_EPISODES, seed=seed + 10_000)
    model = SAC("MlpPolicy", env, learning_rate=1e-3, device="cpu", seed=seed, verbose=0)
    callback = EvalStop(eval_env)
    model.learn(total_timesteps=BUDGET, callback=callback)
    if callback.last_step != model.num_timesteps:
        callback.evaluate()
    wall = time.perf_counter() - start
    env.close()
    eval_env.close()
    return row("sb3", seed, wall, callback.eval_s, int(model.num_timesteps), callback.last)


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"impl": runs[0]["impl"], "seed": "median"}
    for key in ("wall_s", "eval_s", "wall_ex_eval_s", "env_steps", "final"):
        out[key] = statistics.median(r[key] for r in runs)
    out["env_steps"] = int(out["env_steps"])
    out["reached"] = f"{sum(r['reached'] for r in runs)}/{len(runs)}"
    return out


COLUMNS = [
    ("impl", "impl", ""),
    ("seed", "seed", ""),
    ("wall_s", "wall s", ".1f"),
    ("eval_s", "eval s", ".1f"),
    ("wall_ex_eval_s", "wall-eval s", ".1f"),
    ("env_steps", "env steps", ",d"),
    ("final", "eval return", ".1f"),
    ("reached", ">= -200", ""),
]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--impls", nargs="+", default=["rlcore", "rlcore-256", "gym", "sb3"])
    parser.add_argument("--no-sb3", action="store_true")
    args = parser.parse_args(argv)
    meta = setup(
        args,
        "SAC Pendulum: time to an evaluation return of -200",
        method=f"one run per implementation and seed (seeds {args.seeds}), implementations "
        "taking turns within a seed; medians over seeds (--reps unused)",
    )
    impls = [i for i in args.impls if not (args.no_sb3 and i == "sb3")]
    configs = variants()
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for seed in args.seeds:
        order = impls if seed % 2 == 0 else impls[::-1]  # no implementation always first
        for impl in order:
            result = run_sb3(seed) if impl == "sb3" else run_ours(impl, configs[impl], seed)
            runs[impl].append(result)
            print_table([result], COLUMNS)
    rows = [r for impl in impls for r in runs[impl]]
    medians = {impl: median_row(runs[impl]) for impl in impls}
    print()
    print_table(rows + list(medians.values()), COLUMNS)
    if "sb3" in medians:
        for impl in impls:
            if impl != "sb3":
                ratio = medians[impl]["wall_ex_eval_s"] / medians["sb3"]["wall_ex_eval_s"]
                print(f"{impl} / sb3 wall-eval (medians): {ratio:.3f} (target <= {TARGET_RATIO})")
    write_json(args.json, meta, {"rows": rows, "medians": list(medians.values())})


if __name__ == "__main__":
    main()
