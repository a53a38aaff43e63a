"""`python -m pipelines <command>`: the DVC stages, the Prefect flow and its schedule.

Stages (DVC runs these; see dvc.yaml): plugins (the source of an algorithm of your own,
on every `dvc repro`), train and evaluate (`--seed S`, one run per seed of `seeds`), video,
report; collect (data/dvc.yaml: an offline dataset for `replay.offline`); and search
(search/dvc.yaml: an Optuna study, `search --workers N` for N local processes).
`compare [RUN ...]`: a report across experiments and revisions; `baseline`: back to the
committed experiment after `dvc exp run`; `params [--show]`: check params.yaml and show the
resolved experiment. `import-config FILE.json`:
an EmbodiChain training config as params.yaml.
Prefect: `flow` runs the stages as one flow run; `serve` registers the scheduled deployment
and runs it here; `deploy --pool NAME` registers the flows on a work pool for workers.
Exit codes: 0 done, 1 the stage failed (message on stderr), 2 invalid params.yaml.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.stages import lifeline

lifeline.hold_parent()  # under DVC, before the slow imports: a `dvc` killed meanwhile counts

import pipelines.stages.progress  # noqa: E402, F401 (its clock times the stage's start-up)
from pipelines.layout import Layout  # noqa: E402

if TYPE_CHECKING:
    from pipelines.params import Params

STAGES = ("train", "evaluate", "video", "report", "collect")
SEEDED_STAGES = ("train", "evaluate")
# What `python -m pipelines <stage> --help` says each stage does (kept here: no heavy import).
STAGE_HELP = {
    "train": "Train one seed of params.yaml's experiment. Writes "
    "outputs/seeds/S/checkpoints/{final,best}.pt, metrics/seeds/S/{train.json,curve.csv,"
    "provenance.json} "
    "and metrics/seeds/S/live (DVCLive; all or none, at the end), logs every iteration to "
    "outputs/tensorboard; resumes from outputs/seeds/S/checkpoints/resume.pt. Run by DVC "
    "(DVC_STAGE train@S), it trains that seed.",
    "evaluate": "Evaluate one seed's trained policy (evaluation.checkpoint: final or best) "
    "on evaluation.episodes episodes with seeds training never used. Writes "
    "metrics/seeds/S/eval.json.",
    "video": "Record evaluation episodes of the first seed's policy, tiled in one MP4. "
    "Writes outputs/video/episodes.mp4 and metrics/video.json.",
    "report": "Summarise every seed: reports/run/report.md, reports/run/curve.png and "
    "metrics/summary.json (mean and std over seeds).",
    "collect": "Roll out a policy (collect.policy: trained or random) and save the "
    "transitions as an offline dataset at collect.output (default data/offline) with "
    "metrics/collect.json.",
}
EXIT_CODES = "Exit codes: 0 done, 1 the stage failed (one line on stderr), 2 invalid params."


def _stage(name: str) -> Callable[..., object]:
    # Imported on demand: each stage pays only for what it uses (torch, imageio, matplotlib).
    if name == "train":
        from pipelines.stages.train import train

        return train
    if name == "evaluate":
        from pipelines.stages.evaluate import evaluate

        return evaluate
    if name == "video":
        from pipelines.stages.video import record

        return record
    if name == "collect":
        from pipelines.stages.collect import collect

        return collect
    from pipelines.stages.report import report

    return report


def _guarded(
    name: str,
    params_path: Path,
    action: Callable[[Params], object],
    errors: Callable[[], tuple[type[Exception], ...]],
    interrupted: str,
    for_search: bool = False,
) -> int:
    """Validate params, run `action`, and turn expected failures into one-line errors.

    `errors` is called only after the params are valid, so a bad params.yaml is reported
    before the action's heavy imports (torch, optuna) are paid for.
    """
    from pipelines.params import ParamsError, load_params

    try:
        params = load_params(params_path, for_search=for_search)
    except ParamsError as exc:
        for line in exc.lines:
            print(f"error: {exc.path}: {line}", file=sys.stderr)
        return 2
    from pipelines.stages.lifeline import (
        OrphanedError,
        RunLockedError,
        Terminated,
        die_with_parent,
        stopping_on_sigterm,
    )

    expected = (*errors(), OrphanedError, RunLockedError)
    try:
        with stopping_on_sigterm():
            if os.environ.get("DVC_STAGE"):  # run by DVC: stop when `dvc` does
                die_with_parent()
            action(params)
    except expected as exc:
        print(f"error: {name}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        from rlcore.errors import DISK_FULL  # torch-free

        if exc.errno not in DISK_FULL:
            raise
        from pipelines.files import shown_output

        where = f" while writing {shown_output(exc.filename)}" if exc.filename else ""
        print(f"error: {name}: disk full{where} ({exc.strerror}); {interrupted}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        if os.environ.get("RANK", "0") == "0":  # once, not from every torchrun rank
            why = exc.reason if isinstance(exc, Terminated) else "interrupted"
            print(f"error: {name}: {why}; {interrupted}", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    return 0


def _stage_errors() -> tuple[type[Exception], ...]:
    from pipelines.files import OutputError
    from pipelines.stages.launch import LaunchError
    from pipelines.stages.report import SeedResultsError
    from rlcore.errors import (  # torch-free: the report stage never imports torch
        CheckpointError,
        CompileUnavailableError,
        ConfigError,
        DistributedError,
        MissingExtraError,
        NonFiniteError,
    )

    return (
        FileNotFoundError,
        OutputError,
        MissingExtraError,
        CheckpointError,
        ConfigError,
        CompileUnavailableError,
        NonFiniteError,
        SeedResultsError,
        DistributedError,
        LaunchError,
    )


def _search_errors() -> tuple[type[Exception], ...]:
    from pipelines.files import OutputError
    from pipelines.search.study import SearchError
    from rlcore.errors import CompileUnavailableError, ConfigError, MissingExtraError

    return (SearchError, CompileUnavailableError, ConfigError, MissingExtraError, OutputError)


class _UnknownSeedError(ValueError):
    pass


def dvc_stage_seed(name: str) -> int | None:
    """The seed of the DVC stage that runs this command, from the name DVC gives it
    (`train@0`, in DVC_STAGE); None outside DVC or in another stage.

    dvc.yaml's commands carry nothing from params.yaml, since DVC runs them through a shell:
    the seed comes from here, and must still be one of `seeds`.
    """
    stage = os.environ.get("DVC_STAGE", "")
    match = re.fullmatch(rf"(?:.*:)?{re.escape(name)}@(.+)", stage)
    if match is None:
        return None
    try:
        return int(match.group(1))
    except ValueError:
        raise _UnknownSeedError(
            f"DVC stage {stage!r}: a seed must be an integer of `seeds`"
        ) from None


def run_stage(name: str, params_path: Path, seed: int | None = None) -> int:
    """One DVC stage (of one seed for train and evaluate), with one-line errors. Without
    `seed`, a seeded stage run by DVC takes its stage's seed, else the first of `seeds`."""

    def run(params: Params) -> None:
        nonlocal seed
        if seed is None and name in SEEDED_STAGES:
            seed = dvc_stage_seed(name)
        if seed is not None and seed not in params.seeds:
            raise _UnknownSeedError(
                f"--seed {seed} is not one of {params_path}'s seeds {params.seeds}"
            )
        if name == "train" and params.runtime.processes > 1 and not _under_torchrun():
            from pipelines.stages.launch import launch_local

            argv = ["-m", "pipelines", "train", "--params", str(params_path)]
            if seed is not None:
                argv += ["--seed", str(seed)]
            launch_local(params.runtime.processes, argv)
            return
        layout = Layout().for_params(params_path)
        if layout != Layout():
            print(
                f"{name}: {params_path} is not the project's params.yaml: its outputs go "
                f"under {layout.root}/, apart from the main experiment's",
                file=sys.stderr,
            )
        _stage(name)(params, layout.for_seed(params.seeds[0] if seed is None else seed))

    return _guarded(
        name,
        params_path,
        run,
        lambda: (*_stage_errors(), _UnknownSeedError),
        "earlier outputs were left intact",
    )


def _under_torchrun() -> bool:
    from rlcore.distributed import launched_by_torchrun

    return launched_by_torchrun()


def run_search(argv: list[str]) -> int:
    """`search`: the study (coordinator), or `--worker`: one extra process of it."""
    parser = argparse.ArgumentParser(prog="python -m pipelines search")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--workers", type=int, default=1, help="local worker processes")
    parser.add_argument(
        "--join", action="store_true", help="join a running study (keep its RUNNING trials)"
    )
    # A worker process of a search (its index: its sampler seed) and the search's pid.
    parser.add_argument("--worker", type=int, nargs="?", const=0, help=argparse.SUPPRESS)
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    def run(params: Params) -> None:
        from pipelines.search.study import run_worker, search
        from pipelines.stages.lifeline import die_with_parent

        layout = Layout().for_search_params(args.params, params.search.study_name)
        if args.worker is not None:
            if args.parent_pid is not None:
                die_with_parent(args.parent_pid)
            try:
                run_worker(params, layout, worker=args.worker)
            except KeyboardInterrupt:  # its search says so, once for all workers
                raise SystemExit(130) from None
        else:
            search(params, layout, args.workers, args.join, params_path=args.params)

    return _guarded(
        "search",
        args.params,
        run,
        _search_errors,
        "the study keeps every finished trial",
        for_search=True,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "flow":
        from pipelines.orchestration.flows import flow_main

        return flow_main(argv[1:])
    if argv and argv[0] == "search":
        return run_search(argv[1:])
    if argv and argv[0] == "serve":
        from pipelines.orchestration.serve import serve_main

        return serve_main(argv[1:])
    if argv and argv[0] == "deploy":
        from pipelines.orchestration.deploy import deploy_main

        return deploy_main(argv[1:])
    if argv and argv[0] == "import-config":
        from pipelines.import_config import import_config_main

        return import_config_main(argv[1:])
    if argv and argv[0] == "compare":
        from pipelines.compare.page import compare_main

        return compare_main(argv[1:])
    if argv and argv[0] == "baseline":
        from pipelines.orchestration.baseline import baseline_main

        return baseline_main(argv[1:])
    if argv and argv[0] == "plugins":  # reads algorithm.name alone: no params model, no torch
        from pipelines.stages.plugins import plugins_main

        return plugins_main(argv[1:])
    if argv and argv[0] == "params":
        from pipelines.params_cli import params_main

        return params_main(argv[1:])
    if argv and argv[0] in STAGES:
        return _stage_main(argv[0], argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m pipelines",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        choices=[
            "plugins",
            *STAGES,
            "search",
            "compare",
            "baseline",
            "params",
            "import-config",
            "flow",
            "serve",
            "deploy",
        ],
    )
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument(
        "--seed", type=int, help="train/evaluate: which of `seeds` (default: the first)"
    )
    args = parser.parse_args(argv)
    if args.seed is not None and args.command not in SEEDED_STAGES:
        parser.error(f"--seed applies to {' and '.join(SEEDED_STAGES)} only")
    return run_stage(args.command, args.params, args.seed)


def _stage_main(name: str, argv: list[str]) -> int:
    """`python -m pipelines <stage> [--params P] [--seed S]`, with its own --help."""
    parser = argparse.ArgumentParser(
        prog=f"python -m pipelines {name}",
        description=STAGE_HELP[name],
        epilog=f"DVC runs this stage from dvc.yaml (dvc repro). {EXIT_CODES}",
    )
    parser.add_argument(
        "--params",
        type=Path,
        default=Path("params.yaml"),
        help="the experiment file (default: params.yaml)",
    )
    if name in SEEDED_STAGES:
        parser.add_argument(
            "--seed", type=int, help="which of params.yaml's `seeds` (default: the first)"
        )
    args = parser.parse_args(argv)
    return run_stage(name, args.params, getattr(args, "seed", None))


if __name__ == "__main__":
    raise SystemExit(main())
