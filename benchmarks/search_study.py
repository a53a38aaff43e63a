"""The default Optuna study (params.yaml's `search` section) timed end to end, then checked.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.search_study
    .venv/bin/python -m benchmarks.search_study --workers 2 --fresh-seed 1000

In a fresh temporary directory (its own journal, so nothing of the project's study is
touched), `pipelines.search.search` runs the study of `--params` with `--workers` processes:
reported are its wall time, trials by state and the share pruned early (targets: <= 300 s
and >= 30% pruned for the 16-trial TPE + median-pruner CartPole study). Then the best
trial's values are trained once more on `--fresh-seed` (a seed no trial used), with the
trial budget (`search.overrides`) and a stop at the task's threshold, and the benchmark says
whether they solve the task: CartPole return >= 475 over the trainer's evaluation episodes.
Trial numbers are checked to be unique (no duplicated or lost trial across workers).
Seeds and processes are the runs here, so `--reps` is unused.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import base_parser, print_table, setup, verdict, write_json
from pipelines.layout import Layout
from pipelines.params import apply_values, load_params
from pipelines.search import open_study, search, trial_values
from pipelines.train import run_training
from rlcore.trainer import Trainer

TARGET_WALL_S = 300.0
TARGET_PRUNED = 0.3
SOLVED_RETURN = 475.0


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fresh-seed", type=int, default=1000)
    args = parser.parse_args(argv)
    meta = setup(args, "Optuna study end to end", method="one study, then one re-run")
    params = load_params(args.params)
    with tempfile.TemporaryDirectory(prefix="search-study-") as tmp:
        root = Path(tmp)
        (root / "params.yaml").write_text(args.params.read_text())
        layout = Layout(root)
        start = time.perf_counter()
        summary = search(params, layout, workers=args.workers, params_path=root / "params.yaml")
        wall = time.perf_counter() - start
        study = open_study(params, layout)
        numbers = [t.number for t in study.trials]
        best = trial_values(study.best_trial, params.search.space)
    finished = summary["complete"] + summary["pruned"] + summary["fail"]
    pruned_share = summary["pruned"] / max(finished, 1)

    rerun_params = apply_values(
        params,
        {
            **params.search.overrides,
            **best,
            "seeds": [args.fresh_seed],
            "trainer.stop_at_eval_return": SOLVED_RETURN,
        },
    )
    trainer = Trainer(rerun_params.experiment())
    rerun_start = time.perf_counter()
    reached = run_training(trainer)
    rerun_wall = time.perf_counter() - rerun_start
    final = trainer.last_eval.get("eval/episode_return", float("nan"))

    rows = [
        {"figure": "study wall s", "value": wall, "target": f"<= {TARGET_WALL_S:g}",
         "verdict": verdict(wall, TARGET_WALL_S, higher_is_better=False)},
        {"figure": "share of trials pruned", "value": pruned_share,
         "target": f">= {TARGET_PRUNED:g}",
         "verdict": verdict(pruned_share, TARGET_PRUNED, higher_is_better=True)},
        {"figure": f"best params, seed {args.fresh_seed}: eval return", "value": final,
         "target": f">= {SOLVED_RETURN:g}",
         "verdict": verdict(final, SOLVED_RETURN, higher_is_better=True)},
        {"figure": "trial numbers unique", "value": float(len(numbers) == len(set(numbers))),
         "target": "1", "verdict": "met" if len(numbers) == len(set(numbers)) else "MISSED"},
    ]  # fmt: skip
    print()
    print(
        f"{summary['trials']} trials with {args.workers} worker(s): {summary['complete']} "
        f"complete, {summary['pruned']} pruned, {summary['fail']} failed; best value "
        f"{summary.get('best_value')} (trial {summary.get('best_trial')}): {best}"
    )
    print(
        f"re-run on seed {args.fresh_seed}: {trainer.env_steps:,} env steps in {rerun_wall:.1f} s, "
        f"reached {SOLVED_RETURN:g}: {reached}"
    )
    print_table(
        rows,
        [("figure", "figure", ""), ("value", "value", ".3f"), ("target", "target", ""),
         ("verdict", "verdict", "")],
    )  # fmt: skip
    write_json(
        args.json,
        meta,
        {"summary": summary, "wall_s": wall, "best": best, "rerun_return": final,
         "rerun_reached": reached, "rerun_env_steps": trainer.env_steps, "checks": rows},
    )  # fmt: skip


if __name__ == "__main__":
    main()
