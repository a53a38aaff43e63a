"""`python -m pipelines <command>`: the DVC stages, the Prefect flow and its schedule.

Stages (DVC runs these; see dvc.yaml): plugins (the source of an algorithm of your own,
on every `dvc repro`), train and evaluate (`--seed S`, one run per seed of `seeds`), video,
report; collect (data/dvc.yaml: an offline dataset for `replay.offline`); and search
(search/dvc.yaml: an Optuna study, `search --workers N` for N local processes).
`compare [RUN ...]`: a report across experiments and revisions; `baseline`: back to the
committed experiment after `dvc exp run`; `params [--show]`: check params.yaml and show the
resolved experiment. `import-config FILE.json`: an EmbodiChain training config as
params.yaml. Prefect: `flow` runs the stages as one flow run; `serve` registers the
scheduled deployment and runs it here; `deploy --pool NAME` registers the flows on a work
pool for workers.
Exit codes: 0 done, 1 the stage failed (message on stderr), 2 invalid params.yaml.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.stages import lifeline

lifeline.hold_parent()  # under DVC, before the slow imports: a `dvc` killed meanwhile counts

import pipelines.stages.progress  # noqa: E402, F401 (its clock times the stage's start-up)
from pipelines.stages.run import SEEDED_STAGES, STAGES, entry, stage_main  # noqa: E402

# Every command but the stages: its `main(argv) -> exit code`, imported only when run, so a
# command pays for no other's imports (`plugins` reads algorithm.name alone: no params
# model, no torch).
COMMANDS = {
    "plugins": "pipelines.stages.plugins:plugins_main",
    "search": "pipelines.search.cli:search_main",
    "compare": "pipelines.compare.page:compare_main",
    "baseline": "pipelines.orchestration.baseline:baseline_main",
    "params": "pipelines.params_cli:params_main",
    "import-config": "pipelines.import_config:import_config_main",
    "flow": "pipelines.orchestration.flows:flow_main",
    "serve": "pipelines.orchestration.serve:serve_main",
    "deploy": "pipelines.orchestration.deploy:deploy_main",
}


_dispatched: list[str] = []
"""The commands `main` ran in this process, in order (one, however the line was written)."""


def dispatched() -> str | None:
    """The command `main` ran (a stage or another), or None before it chose one: what the
    process's exit and its error messages name, with `--params F` before it or after."""
    return _dispatched[-1] if _dispatched else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else None
    if command in COMMANDS:
        _dispatched.append(command)
        return entry(COMMANDS[command])(argv[1:])
    if command in STAGES:
        _dispatched.append(command)
        return stage_main(command, argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m pipelines",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=[*STAGES, *COMMANDS])
    parser.add_argument("--params", type=Path, help="the experiment file (default: params.yaml)")
    parser.add_argument(
        "--seed", type=int, help="train/evaluate: which of `seeds` (default: the first)"
    )
    args, arguments = parser.parse_known_args(argv)  # the command's own, left to its parser
    if args.seed is not None and args.command not in SEEDED_STAGES:
        parser.error(f"--seed applies to {' and '.join(SEEDED_STAGES)} only")
    # Options written before the command are the command's own: its parser takes them (or
    # says it takes no such option), as if they had followed it.
    given = [] if args.params is None else ["--params", str(args.params)]
    given += [] if args.seed is None else ["--seed", str(args.seed)]
    return main([args.command, *given, *arguments])


# The top-level modules of the project's requirements (pyproject.toml's `dependencies`).
REQUIRED_MODULES = frozenset({
    "torch", "tensordict", "gymnasium", "numpy", "pydantic", "yaml", "dvc", "prefect", "fastapi",
    "sqlalchemy", "imageio", "imageio_ffmpeg", "matplotlib", "markdown_it", "optuna", "plotly",
    "dvclive", "tensorboard",
})  # fmt: skip


def missing_requirement(exc: ModuleNotFoundError, command: str) -> str | None:
    """What to do about a required package this interpreter lacks (one line), or None where
    the missing module is not a requirement. `dvc` runs a stage's `python` from PATH: a
    `.venv/bin/dvc` run without the environment activated reaches another Python."""
    top = (exc.name or "").split(".")[0]
    if top not in REQUIRED_MODULES:
        return None
    if sys.prefix == sys.base_prefix:  # not a virtual environment: not the project's
        fix = (
            "it is not the project's environment: activate that (`source .venv/bin/activate`, "
            "which `make setup` creates) and run again"
        )
    else:
        fix = f"install the project into it (`make setup`, or `{sys.executable} -m pip install "
        fix += "-c constraints.txt -e .`)"
    return f"error: {command}: {sys.executable} has no {top}, which this project needs; {fix}"


if __name__ == "__main__":
    try:
        code = main()
    except ModuleNotFoundError as exc:
        message = missing_requirement(exc, dispatched() or "pipelines")
        if message is None:
            raise
        print(message, file=sys.stderr)
        raise SystemExit(1) from None
    if dispatched() in STAGES:  # torch imported, files closed: no teardown
        from pipelines.stages.prompt_exit import exit_promptly

        exit_promptly(code)
    raise SystemExit(code)
