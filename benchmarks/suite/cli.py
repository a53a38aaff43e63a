"""The command line: `python -m benchmarks.suite` (the package's docstring says what it does)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks.common import base_parser, setup
from benchmarks.env_defaults import EVAL_EPISODES
from benchmarks.suite import __doc__ as suite_doc
from benchmarks.suite.estimates import print_estimates
from benchmarks.suite.jobs import FAMILIES, IMPLS, MUJOCO, is_discrete, schedule, suite_envs
from benchmarks.suite.references import (
    cached,
    env_traits,
    random_return,
    simulator_cost,
    still_return,
)
from benchmarks.suite.report import (
    print_aggregates,
    print_gaps,
    print_simulator,
    print_tasks,
    print_traits,
)
from benchmarks.suite.runs import run_pending, stoppable
from benchmarks.suite.scores import collect


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = base_parser(suite_doc.splitlines()[0])
    parser.prog = "python -m benchmarks.suite"
    parser.add_argument("--algorithm", choices=["ppo", "sac"], default="ppo")
    parser.add_argument("--envs", nargs="+", help="Gymnasium ids (default: the whole suite)")
    parser.add_argument("--family", choices=sorted(FAMILIES), help="one family's tasks only")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument(
        "--steps", type=int, help="env steps per run (default: PPO 300k on MuJoCo, 100k on "
        "classic control; SAC 100k)"
    )  # fmt: skip
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--results", type=Path, help="default: benchmarks/results/suite-<alg>/")
    parser.add_argument("--report-only", action="store_true", help="train nothing")
    parser.add_argument("--estimate-only", action="store_true", help="time, then stop")
    args = parser.parse_args(argv)
    for flag, value in (("--steps", args.steps), ("--eval-episodes", args.eval_episodes)):
        if value is not None and value <= 0:
            parser.error(f"{flag} must be a positive integer, got {value}")
    if args.envs and args.family:
        parser.error("--envs and --family: give one of them")
    args.envs = args.envs or suite_envs(args.algorithm, args.family)
    if args.algorithm == "sac" and (discrete := [e for e in args.envs if is_discrete(e)]):
        parser.error(f"--envs: SAC needs continuous actions, which {', '.join(discrete)} lack")
    args.results = args.results or Path(__file__).parents[1] / "results" / f"suite-{args.algorithm}"
    return args


def installed(envs: list[str], impls: list[str]) -> tuple[list[str], list[str]]:
    """The tasks and implementations whose packages are installed, with a note on the rest."""
    if importlib.util.find_spec("mujoco") is None and (no := [e for e in envs if e in MUJOCO]):
        print(f'note: mujoco is not installed (pip install -e ".[mujoco]"); skipping {no}')
        envs = [env for env in envs if env not in no]
    if importlib.util.find_spec("stable_baselines3") is None and "sb3" in impls:
        print('note: stable-baselines3 is not installed (pip install -e ".[bench]"): ours alone')
        impls = [impl for impl in impls if impl != "sb3"]
    return envs, impls


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    envs, impls = installed(args.envs, args.impls)
    meta = setup(args, f"suite: {args.algorithm}, only env.name vs SB3's defaults",
                 method=f"seeds {args.seeds}; results in {args.results}")  # fmt: skip
    jobs = schedule(args.algorithm, envs, args.seeds, impls, args.steps)
    randoms = cached(args.results / "random.json", envs, random_return)
    if not args.report_only:
        print_estimates(jobs, args.results)
        if args.estimate_only:
            return
        with stoppable():
            run_pending(jobs, args.results, eval_episodes=args.eval_episodes)
    tasks = collect(jobs, args.results, randoms)
    print()
    print_tasks(tasks, len(args.seeds))
    print()
    traits = cached(args.results / "traits.json", envs, env_traits)
    print_traits(tasks, traits, cached(args.results / "still.json", envs, still_return))
    print()
    print_simulator(tasks, cached(args.results / "simulator.json", envs, simulator_cost))
    aggregates = print_aggregates(tasks, np.random.default_rng(0))
    print_gaps(jobs, args.results, tasks)
    common.write_json(args.json, meta, {"tasks": [dataclasses.asdict(t) for t in tasks],
                                        "aggregates": aggregates})  # fmt: skip


if __name__ == "__main__":
    main()
