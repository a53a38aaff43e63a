"""`python -m pipelines params [--show]`: check params.yaml, and show what a run will use.

Checks the file exactly as every stage does (one line per problem, exit code 2), builds what
`train` builds before it trains (the env, one instance, and the policy: the same one-line
refusals, such as SAC on discrete actions or a CUDA device on a machine without one), and says
in one line what it trains and where the keys it leaves out come from (`preset`). What only
the search refuses (a `search.space` written for another algorithm than the chosen one) is
a `note:` line, exit code 0: the experiment's stages never read `search`. `--show`
prints the resolved experiment as YAML: every section with the keys the file leaves out
filled in from the preset or the defaults, and of the `algorithm` section only the chosen
algorithm's settings (the others' sections are not used).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from pipelines.params import Params, ParamsError, load_params, plain_data
from pipelines.search.space import checked_search
from rlcore.presets import choose_preset


def resolved(params: Params) -> dict[str, Any]:
    """The experiment as the stages read it, as plain data (what `--show` prints)."""
    data = params.model_dump(mode="json")
    del data["trainer"]["seed"]  # the seeds are the top-level `seeds`
    algorithm = params.algorithm
    section = algorithm.section
    data["algorithm"] = {"name": algorithm.name, section: plain_data(asdict(algorithm.config))}
    return data


def summary(params: Params) -> str:
    """What the file trains, in one line."""
    trainer = params.trainer
    targets = trainer.stop_targets()
    stop = f", stopping at {targets}" if targets else ""
    defaults = choose_preset(
        params.preset, params.env.name, params.algorithm.name, params.env.device
    )
    compiled = ""
    if params.runtime.compile == "auto":
        compiles, why = params.runtime.compiles(params.experiment(seed=params.seeds[0]))
        compiled = f"; runtime.compile auto: {'compiled' if compiles else 'eager'} ({why})"
    return (
        f"{params.name}: {params.algorithm.name} on {params.env.name} ({params.env.num_envs} "
        f"envs, {params.env.device}), up to {trainer.total_env_steps:,d} env steps per seed"
        f"{stop}, seeds {params.seeds}; unset keys from {defaults.description}{compiled}"
    )


def params_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines params",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--show", action="store_true", help="print the resolved experiment as YAML")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        checked_search(params, args.params, for_search=False)
    except ParamsError as exc:
        for line in exc.lines:
            print(f"error: {exc.path}: {line}", file=sys.stderr)
        return 2
    from rlcore.errors import ConfigError, MissingExtraError
    from rlcore.trained import check_experiment

    try:  # what `train` builds before it trains: its refusals are refused here
        check_experiment(params.experiment(seed=params.seeds[0]))
    except (ConfigError, MissingExtraError) as exc:
        print(f"error: {args.params}: {exc}", file=sys.stderr)
        return 2
    try:
        checked_search(params, args.params)
    except ParamsError as exc:
        for line in exc.lines:
            print(f"note: {exc.path}: {line} (the search alone refuses it)", file=sys.stderr)
    if args.show:
        print(f"# {args.params}, resolved: {summary(params)}")
        print(yaml.safe_dump(resolved(params), sort_keys=False), end="")
    else:
        print(f"{args.params}: valid. {summary(params)}")
    return 0
