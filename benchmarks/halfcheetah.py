"""PPO on Gymnasium's MuJoCo HalfCheetah-v5 through the bridge: final return at 1M env steps.

Run from the repository root (needs `pip install -e ".[mujoco]"`):

    .venv/bin/python -m benchmarks.halfcheetah --seeds 0 1 2

Trains `rlcore.presets.PRESETS["gym_halfcheetah"]` (8 sync envs, 1M env steps) once per seed
and reports the last evaluation's mean return over 8 deterministic episodes, the env steps and
the wall time (evaluation included; it is ~0.6 s per evaluation). Target: mean return >=
1,500 at 1M steps (CleanRL's published PPO: 1,442.6 +- 46 at 1M on HalfCheetah-v4).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import time
from typing import Any

from benchmarks.common import base_parser, print_table, setup, verdict, write_json
from rlcore.presets import PRESETS
from rlcore.trainer import Trainer

TARGET_RETURN = 1500.0


def run(seed: int, total_steps: int) -> dict[str, Any]:
    base = PRESETS["gym_halfcheetah"]
    cfg = dataclasses.replace(
        base, trainer=dataclasses.replace(base.trainer, seed=seed, total_env_steps=total_steps)
    )
    start = time.perf_counter()

    def progress(step: int, metrics: dict[str, float]) -> None:
        if "eval/episode_return" in metrics:
            print(f"    {step:>9,d} steps  {time.perf_counter() - start:6.1f} s  "
                  f"eval return {metrics['eval/episode_return']:8.1f}", flush=True)  # fmt: skip

    trainer = Trainer(cfg, sink=progress)
    try:
        trainer.run()
    finally:
        trainer.env.close()
        trainer.eval_env.close()
    return {
        "seed": seed,
        "env_steps": trainer.env_steps,
        "wall_s": time.perf_counter() - start,
        "eval_return": trainer.last_eval["eval/episode_return"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("mujoco") is None:
        raise SystemExit('mujoco is not installed: pip install -e ".[mujoco]"')
    meta = setup(args, "halfcheetah", method=f"one run per seed {args.seeds} (--reps unused)")
    rows = []
    for seed in args.seeds:
        print(f"... seed {seed}", flush=True)
        rows.append(run(seed, args.total_steps))
    median = {
        "seed": "median",
        **{
            k: statistics.median(r[k] for r in rows) for k in ("env_steps", "wall_s", "eval_return")
        },
    }
    print()
    print_table(
        [*rows, median],
        [("seed", "seed", ""), ("env_steps", "env steps", ",.0f"), ("wall_s", "wall s", ".1f"),
         ("eval_return", "eval return", ",.1f")],
    )  # fmt: skip
    mean = statistics.fmean(r["eval_return"] for r in rows)
    print(f"\nmean eval return over seeds: {mean:,.1f} (target >= {TARGET_RETURN:,.0f}): "
          f"{verdict(mean, TARGET_RETURN, True)}")  # fmt: skip
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
