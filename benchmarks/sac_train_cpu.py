"""Training CPU of a short SAC run with a task's defaults: the whole run, its updates, the rest.

Run from the repository root:

    .venv/bin/python -m benchmarks.sac_train_cpu
    .venv/bin/python -m benchmarks.sac_train_cpu --envs Humanoid-v5 --steps 11000

Trains what a params.yaml holding only `env.name` and `algorithm.name: sac` gives (the
MuJoCo family's SAC defaults), for `--steps` env steps on one seed (one evaluation episode
at the end), and prints the process CPU seconds of the run, of its updates (`SAC.update`
calls), the first update apart (compiling, when compiled) and the mean and median of the
later ones.
`--compile` forces `runtime.compile` on or off (default: on, what this times; `auto`
leaves SAC eager).

Why: `benchmarks.sac_update` times one update on a fixed batch; this times the updates
inside training, where each samples a new batch and the simulator and acting share the
caches. To compare two revisions, run the same command at each, side by side (one process
per core): on a shared machine a run's CPU time drifts between runs hours apart by more
than a few percent.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from benchmarks.common import base_parser, print_table, setup, write_json
from benchmarks.env_defaults import experiment
from rlcore.trainer import Trainer

DEFAULT_ENVS = ["Humanoid-v5", "Walker2d-v5"]
SKIPPED_UPDATES = 10  # the first updates: compiling, then warming caches


def timed_run(env_id: str, steps: int, seed: int, compile_update: bool) -> dict[str, Any]:
    """Train `env_id` for `steps` env steps; the CPU seconds of the run and of each update."""
    cfg = experiment(env_id, steps, "sac")
    trainer_cfg = dataclasses.replace(
        cfg.trainer, seed=seed, eval_every_iters=0, eval_episodes=1,
        stop_at_eval_return=None, stop_at_eval_success=None,
    )  # fmt: skip
    trainer = Trainer(dataclasses.replace(cfg, trainer=trainer_cfg), compile_loss=compile_update)
    calls: list[float] = []
    update = trainer.algo.update

    def timed_update(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return update(*args, **kwargs)
        finally:
            calls.append(time.process_time() - start)

    trainer.algo.update = timed_update  # type: ignore[method-assign]
    start = time.process_time()
    trainer.run()
    run_s = time.process_time() - start
    trainer.env.close()
    if trainer.eval_env is not None:
        trainer.eval_env.close()
    later = calls[SKIPPED_UPDATES:] or calls
    return {
        "env": env_id,
        "steps": steps,
        "compiled": compile_update,
        "run_s": run_s,
        "updates": len(calls),
        "update_s": sum(calls),
        "rest_s": run_s - sum(calls),
        "first_update_s": calls[0] if calls else 0.0,
        "update_mean_ms": 1e3 * statistics.mean(later) if later else 0.0,
        "update_median_ms": 1e3 * statistics.median(later) if later else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=DEFAULT_ENVS)
    parser.add_argument("--steps", type=int, default=11_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compile", choices=["true", "false"], default="true",
        help="runtime.compile for SAC's update (default true: see above)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps <= 0:
        raise SystemExit(f"--steps must be a positive integer, got {args.steps}")
    meta = setup(args, "SAC training CPU", "process CPU seconds of one run per task")
    rows = [timed_run(env, args.steps, args.seed, args.compile == "true") for env in args.envs]
    print_table(
        rows,
        [
            ("env", "task", ""),
            ("steps", "env steps", ",d"),
            ("compiled", "compiled", ""),
            ("run_s", "run CPU s", ".1f"),
            ("updates", "updates", ",d"),
            ("update_s", "updates CPU s", ".1f"),
            ("rest_s", "the rest CPU s", ".1f"),
            ("first_update_s", "first update s", ".1f"),
            ("update_mean_ms", f"later updates mean ms (after {SKIPPED_UPDATES})", ".3f"),
            ("update_median_ms", "median ms", ".3f"),
        ],
    )
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
