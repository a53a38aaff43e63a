"""A study's trials on tasks it did not train on: the held-out check of family defaults.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.family_check --params search/mujoco_family-ppo.yaml \
        --trials 0 2 --envs InvertedDoublePendulum-v5 InvertedPendulum-v5 Reacher-v5

A study across tasks (`search.tasks`) chooses settings on some tasks of a family; this trains
each of `--trials`' settings, applied exactly as the study applied them (the params file's
preset and overrides, the trial's values, `env.name` replaced), on each of `--envs` and
`--seeds`, for `--steps` env steps (default: the suite's budget for the study's algorithm
and the task), evaluates on `--eval-episodes` deterministic episodes with seeds training
never used, and prints the returns side by side, with each trial's score against SB3's
defaults where `benchmarks.suite` has their results (`--suite`; the versioned ones are in
benchmarks/records/suite-<algorithm>). Results are kept per run in
`--results`/family-<study>/ and reused (resumable).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import optuna

from benchmarks.common import base_parser, mean_std, setup, write_json
from benchmarks.env_defaults import env_name
from benchmarks.suite.jobs import Job, default_steps, load_result, read_json
from benchmarks.suite.scores import normalised
from pipelines.files import write_json as write_result
from pipelines.layout import Layout
from pipelines.params import apply_values, load_params
from pipelines.search.sampling import trial_values
from pipelines.search.space import search_section
from pipelines.search.storage import make_storage
from rlcore.trainer import Trainer


def train_once(cfg: Any, eval_episodes: int) -> dict[str, float]:
    """Train `cfg` to its budget (evaluation only at the end) and evaluate it."""
    trainer_cfg = dataclasses.replace(
        cfg.trainer, eval_every_iters=0, eval_episodes=eval_episodes, stop_at_eval_return=None,
        stop_at_eval_success=None,
    )  # fmt: skip
    cpu = time.process_time()
    trainer = Trainer(dataclasses.replace(cfg, trainer=trainer_cfg))
    try:
        result = trainer.run()
    finally:
        trainer.env.close()
        if trainer.eval_env is not None:
            trainer.eval_env.close()
    return {
        "return": result.eval_metrics["eval/episode_return"],
        "cpu_s": time.process_time() - cpu,
    }


def sb3_mean(results: Path, algorithm: str, env_id: str, steps: int, seeds: range) -> float | None:
    """SB3's defaults' mean return on `env_id` from the suite's results, if any."""
    found = [
        load_result(results / job.filename, job)
        for job in (Job(algorithm, env_id, "sb3", seed, steps) for seed in seeds)
    ]
    returns = [r["return"] for r in found if r is not None]
    return statistics.fmean(returns) if returns else None


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--params", type=Path, required=True, help="the study's params file")
    parser.add_argument("--trials", nargs="+", type=int, required=True)
    parser.add_argument("--envs", nargs="+", required=True, help="Gymnasium ids")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument(
        "--steps", type=int, help="env steps per run (default: the suite's for the algorithm)"
    )
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    parser.add_argument(
        "--suite", type=Path, help="the suite's results to score against (default: "
        "<results>/suite-<the study's algorithm>; the versioned ones: benchmarks/records/...)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    meta = setup(args, "family defaults on held-out tasks")
    params = load_params(args.params)
    search = search_section(params, args.params)
    layout = Layout().for_search_params(args.params, search.study_name)
    # Loaded, not opened: reading a study must not write to its storage.
    study = optuna.load_study(study_name=search.study_name, storage=make_storage(search, layout))
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    out = args.results / f"family-{search.study_name}"
    algorithm = params.algorithm.name
    suite = args.suite or args.results / f"suite-{algorithm}"
    rows = []
    steps = {env_id: args.steps or default_steps(algorithm, env_id) for env_id in args.envs}
    for env_id in args.envs:
        for number in args.trials:
            values = {**search.overrides, **trial_values(by_number[number], search.space)}
            values |= {"env.name": env_name(env_id), "trainer.total_env_steps": steps[env_id]}
            for seed in args.seeds:
                path = out / f"{env_id}_trial{number}_seed{seed}_{steps[env_id]}.json"
                found = read_json(path)
                if not isinstance(found, dict):
                    cfg = apply_values(params, values).experiment(seed=params.seeds[0])
                    cfg = dataclasses.replace(
                        cfg, trainer=dataclasses.replace(cfg.trainer, seed=seed)
                    )
                    print(f"... {env_id} trial {number} seed {seed}", flush=True)
                    found = train_once(cfg, args.eval_episodes)
                    write_result(path, found)
                rows.append({"env": env_id, "trial": number, "seed": seed, **found})
    print()
    print("| task | " + " | ".join(f"trial {n}" for n in args.trials) + " |")
    print("|---|" + "---|" * len(args.trials))
    randoms = read_json(suite / "random.json") or {}
    for env_id in args.envs:
        sb3 = sb3_mean(suite, algorithm, env_id, steps[env_id], range(3))
        cells = []
        for number in args.trials:
            returns = [r["return"] for r in rows if r["env"] == env_id and r["trial"] == number]
            mean, spread = mean_std(returns)
            cell = f"{mean:,.1f} ± {spread:,.1f}" if len(returns) > 1 else f"{mean:,.1f}"
            if sb3 is not None and env_id in randoms:
                cell += f" (score {normalised(mean, randoms[env_id], sb3):.2f})"
            cells.append(cell)
        print(f"| {env_id} | " + " | ".join(cells) + " |")
    write_json(args.json, meta, {"rows": rows})
    print(json.dumps({"runs": len(rows)}))


if __name__ == "__main__":
    main()
