"""PPO on HalfCheetah: final return at 1M env steps, through the Gymnasium bridge and natively.

Run from the repository root (needs `pip install -e ".[mujoco]"`):

    .venv/bin/python -m benchmarks.halfcheetah --seeds 0 1 2
    .venv/bin/python -m benchmarks.halfcheetah --seeds 0 --backends gym native

Per seed, trains each backend's preset side by side (one after the other, same seed):

- gym: `PRESETS["gym_halfcheetah"]`, Gymnasium's HalfCheetah-v5 through the bridge (8 sync
  envs);
- native: `PRESETS["mujoco_halfcheetah"]`, the same experiment on `mujoco:HalfCheetah`
  (the same task stepped by mujoco.batch, rlcore.envs.mujoco_batch).

Reports the last evaluation's mean return over 8 deterministic episodes, the env steps and
the wall time (evaluation included). Targets: mean return >= 1,500 at 1M steps (CleanRL's
published PPO: 1,442.6 +- 46 at 1M on HalfCheetah-v4); native faster than gym.
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


PRESET_OF = {"gym": "gym_halfcheetah", "native": "mujoco_halfcheetah"}
FIGURES = ("env_steps", "wall_s", "eval_return")


def run(backend: str, seed: int, total_steps: int) -> dict[str, Any]:
    base = PRESETS[PRESET_OF[backend]]
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
        "backend": backend,
        "seed": seed,
        "env_steps": trainer.env_steps,
        "wall_s": time.perf_counter() - start,
        "eval_return": trainer.last_eval["eval/episode_return"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--backends", nargs="+", choices=sorted(PRESET_OF), default=["gym"])
    args = parser.parse_args(argv)
    if importlib.util.find_spec("mujoco") is None:
        raise SystemExit('mujoco is not installed: pip install -e ".[mujoco]"')
    meta = setup(args, "halfcheetah", method=f"one run per seed {args.seeds} (--reps unused)")
    rows = []
    for seed in args.seeds:
        for backend in args.backends:
            print(
                f"... seed {seed}, {backend} ({PRESETS[PRESET_OF[backend]].env.name})", flush=True
            )
            rows.append(run(backend, seed, args.total_steps))
    summary = []
    for backend in args.backends:
        mine = [r for r in rows if r["backend"] == backend]
        summary.append({
            "backend": backend, "seed": "median",
            **{k: statistics.median(r[k] for r in mine) for k in FIGURES},
        })  # fmt: skip
    print()
    print_table(
        [*rows, *summary],
        [("backend", "backend", ""), ("seed", "seed", ""), ("env_steps", "env steps", ",.0f"),
         ("wall_s", "wall s", ".1f"), ("eval_return", "eval return", ",.1f")],
    )  # fmt: skip
    print()
    for backend in args.backends:
        mean = statistics.fmean(r["eval_return"] for r in rows if r["backend"] == backend)
        print(f"{backend}: mean eval return over seeds {mean:,.1f} (target >= "
              f"{TARGET_RETURN:,.0f}): {verdict(mean, TARGET_RETURN, True)}")  # fmt: skip
    if set(args.backends) == {"gym", "native"}:
        for seed in args.seeds:
            wall = {r["backend"]: r["wall_s"] for r in rows if r["seed"] == seed}
            ratio = wall["native"] / wall["gym"]
            print(f"seed {seed}: native / gym wall time {ratio:.3f} (target < 1): "
                  f"{verdict(ratio, 1.0, False)}")  # fmt: skip
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
