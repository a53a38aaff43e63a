"""The default Optuna study (params.yaml's `search` section) timed end to end, then checked.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.search_study
    .venv/bin/python -m benchmarks.search_study --workers 2 --fresh-seed 1000

In a fresh temporary directory (its own journal, so nothing of the project's study is
touched), `pipelines.search.stage.search` runs the study of `--params` with `--workers` processes:
reported are its wall time, trials by state and the share pruned early (targets: <= 300 s
and >= 30% pruned for the default 16-trial TPE + median-pruner study). Then the best
trial's values and the params' own values are each trained once more on `--fresh-seed` (a
seed no trial used) with the full experiment's budget and stop target (the default
experiment's: PushCube success >= 0.9): the benchmark says whether the best values reach it
and in how many env steps, beside the untuned params'. Trial numbers are checked to be
unique (no duplicated or lost trial across workers). Seeds and processes are the runs here,
so `--reps` is unused.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, print_table, setup, verdict, write_json
from pipelines.layout import Layout
from pipelines.params import Params, apply_values, load_params
from pipelines.search.sampling import trial_values
from pipelines.search.space import search_section
from pipelines.search.stage import search
from pipelines.search.study import open_study
from pipelines.stages.train import run_training
from rlcore.trainer import Trainer

TARGET_WALL_S = 300.0
TARGET_PRUNED = 0.3


def stop_target(params: Params) -> str:
    """The experiment's stop target, in words; the re-runs must reach it."""
    targets = params.experiment().trainer.stop_targets()
    if not targets:
        raise SystemExit("the params set no stop target (trainer.stop_at_eval_success or _return)")
    return targets


def rerun(params: Params) -> dict[str, Any]:
    """Train the first seed of `params` once, to its budget or stop target."""
    trainer = Trainer(params.experiment(seed=params.seeds[0]))
    start = time.perf_counter()
    reached = run_training(trainer)
    key = "eval/success_rate" if "eval/success_rate" in trainer.last_eval else "eval/episode_return"
    return {
        "reached": reached,
        "env_steps": trainer.env_steps,
        "wall_s": time.perf_counter() - start,
        "final": {key: trainer.last_eval.get(key, float("nan"))},
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fresh-seed", type=int, default=1000)
    args = parser.parse_args(argv)
    meta = setup(args, "Optuna study end to end", method="one study, then two re-runs")
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
        best = trial_values(study.best_trial, search_section(params).space)
    finished = summary["complete"] + summary["pruned"] + summary["fail"]
    pruned_share = summary["pruned"] / max(finished, 1)

    target = stop_target(params)
    reruns = {
        "best": rerun(apply_values(params, {**best, "seeds": [args.fresh_seed]})),
        "params.yaml": rerun(apply_values(params, {"seeds": [args.fresh_seed]})),
    }

    rows = [
        {"figure": "study wall s", "value": wall, "target": f"<= {TARGET_WALL_S:g}",
         "verdict": verdict(wall, TARGET_WALL_S, higher_is_better=False)},
        {"figure": "share of trials pruned", "value": pruned_share,
         "target": f">= {TARGET_PRUNED:g}",
         "verdict": verdict(pruned_share, TARGET_PRUNED, higher_is_better=True)},
        {"figure": f"best params, seed {args.fresh_seed}: reach {target}",
         "value": float(reruns["best"]["reached"]), "target": "1",
         "verdict": "met" if reruns["best"]["reached"] else "MISSED"},
        {"figure": "env steps to it: best params / params.yaml's",
         "value": reruns["best"]["env_steps"] / reruns["params.yaml"]["env_steps"],
         "target": "reported", "verdict": ""},
        {"figure": "trial numbers unique", "value": float(len(numbers) == len(set(numbers))),
         "target": "1", "verdict": "met" if len(numbers) == len(set(numbers)) else "MISSED"},
    ]  # fmt: skip
    print()
    print(
        f"{summary['trials']} trials with {args.workers} worker(s): {summary['complete']} "
        f"complete, {summary['pruned']} pruned, {summary['fail']} failed; best value "
        f"{summary.get('best_value')} (trial {summary.get('best_trial')}): {best}"
    )
    for name, result in reruns.items():
        print(
            f"{name} values on seed {args.fresh_seed}: {result['env_steps']:,} env steps in "
            f"{result['wall_s']:.1f} s, final {result['final']}, reached {target}: "
            f"{result['reached']}"
        )
    print_table(
        rows,
        [("figure", "figure", ""), ("value", "value", ".3f"), ("target", "target", ""),
         ("verdict", "verdict", "")],
    )  # fmt: skip
    write_json(
        args.json,
        meta,
        {"summary": summary, "wall_s": wall, "best": best, "reruns": reruns,
         "checks": rows},
    )  # fmt: skip


if __name__ == "__main__":
    main()
