"""One PPO/GRPO update, eager against `torch.compile`d loss (`runtime.compile`).

Run from the repository root:

    .venv/bin/python -m benchmarks.compile_update
    .venv/bin/python -m benchmarks.compile_update --tasks cartpole mujoco_halfcheetah --reps 9

For each task preset (and algorithm), two Trainers are built from the same config, one with
`compile_loss=True`; each collects one rollout. The compiled one's first update is timed
alone: it includes compiling (torch's on-disk cache makes later processes faster, so run
with a fresh TORCHINDUCTOR_CACHE_DIR for the cold figure). Then `algo.update(rollout)` of
the two is timed in interleaved repetitions (the same rollout each time; the policy keeps
learning from it, which changes no op count). Reports the median update time of each, their
ratio within a repetition, and how many updates a run needs before the compile has paid
for itself, against the preset's budget (a run that reaches its target stops earlier).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import time
from typing import Any

from benchmarks.common import (
    base_parser,
    preset_or_note,
    print_table,
    setup,
    time_interleaved,
    write_json,
)
from rlcore.trainer import Trainer

DEFAULT_TASKS = ["cartpole", "pendulum", "mujoco_halfcheetah"]


def measure(task: str, algorithm: str, reps: int) -> dict[str, Any] | None:
    base = preset_or_note(task, "its update", algorithm)
    if base is None:
        return None
    # No evaluation during the benchmark: only the update is timed.
    cfg = dataclasses.replace(base, trainer=dataclasses.replace(base.trainer, eval_every_iters=0))
    eager, compiled = Trainer(cfg), Trainer(cfg, compile_loss=True)
    try:
        for trainer in (eager, compiled):
            trainer.collector.collect()
        start = time.perf_counter()
        compiled.algo.update(compiled.rollout)
        first_s = time.perf_counter() - start
        timings = time_interleaved(
            {
                "eager": lambda: eager.algo.update(eager.rollout),
                "compiled": lambda: compiled.algo.update(compiled.rollout),
            },
            reps,
            min_rep_s=0,
        )
    finally:
        for trainer in (eager, compiled):
            trainer.env.close()
            if trainer.eval_env is not None:
                trainer.eval_env.close()
    eager_s, compiled_s = timings["eager"].median_s, timings["compiled"].median_s
    algo_cfg = cfg.algo
    saved = eager_s - compiled_s
    return {
        "task": task,
        "algorithm": algorithm,
        "minibatches": algo_cfg.num_epochs * algo_cfg.num_minibatches,
        "eager_ms": eager_s * 1e3,
        "compiled_ms": compiled_s * 1e3,
        "ratio": statistics.median(
            c / e
            for c, e in zip(timings["compiled"].samples_s, timings["eager"].samples_s, strict=True)
        ),
        "first_s": first_s,
        "break_even_updates": max(first_s - compiled_s, 0.0) / saved if saved > 0 else float("inf"),
        "budget_updates": cfg.total_iters,
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS)
    parser.add_argument("--algorithms", nargs="+", choices=["ppo", "grpo"], default=["ppo"])
    args = parser.parse_args(argv)
    tasks = [
        t for t in args.tasks if not t.startswith("mujoco_") or importlib.util.find_spec("mujoco")
    ]
    meta = setup(
        args,
        "compile_update",
        method=f"{args.reps} interleaved repetitions of one update on one collected rollout",
    )
    rows = []
    for task in tasks:
        for algorithm in args.algorithms:
            print(f"... {task} ({algorithm})", flush=True)
            row = measure(task, algorithm, args.reps)
            if row is not None:
                rows.append(row)
    print()
    print_table(
        rows,
        [("task", "task", ""), ("algorithm", "algo", ""), ("minibatches", "minibatches", "d"),
         ("eager_ms", "eager ms", ".1f"), ("compiled_ms", "compiled ms", ".1f"),
         ("ratio", "compiled / eager", ".3f"), ("first_s", "first update s", ".1f"),
         ("break_even_updates", "break-even updates", ".0f"),
         ("budget_updates", "updates in budget", ",d")],
    )  # fmt: skip
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
