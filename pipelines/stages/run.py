"""Running one DVC stage: which seed, where its outputs go, and one-line errors.

`python -m pipelines <stage>` (what dvc.yaml runs) comes here. A stage's exit code says how
it ended (`EXIT_CODES`); an expected failure is one line on stderr, never a traceback, and
what the stage wrote before stays intact (each output is replaced atomically). The search
runs through `guarded` too (`pipelines.search.cli`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.layout import Layout

if TYPE_CHECKING:
    from pipelines.params import Params

STAGES = ("train", "evaluate", "video", "report", "collect")
SEEDED_STAGES = ("train", "evaluate")
ENV_STAGES = ("train", "evaluate", "video", "collect")  # they build envs, and may render them
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


# Each stage's function, imported on demand: a stage pays only for what it uses (torch,
# imageio, matplotlib).
STAGE_ENTRIES = {
    "train": "pipelines.stages.train:train",
    "evaluate": "pipelines.stages.evaluate:evaluate",
    "video": "pipelines.stages.video:record",
    "collect": "pipelines.stages.collect:collect",
    "report": "pipelines.stages.report:report",
}


def entry(target: str) -> Callable[..., Any]:
    """The function `module:name` names, its module imported now."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _stage(name: str) -> Callable[..., object]:
    return entry(STAGE_ENTRIES[name])


def set_render_env() -> None:
    """Set what rendering needs where no display is set (SDL's dummy drivers for pygame,
    an offscreen MUJOCO_GL), keeping every value already set; before any env is built.

    rlcore only reads the process environment, so its entry points set it: here, for the
    stages and the search (docs/guide.md, "Rendering without a display").
    """
    from rlcore.envs.headless import headless_render_env  # imports torch: env stages only

    os.environ.update(headless_render_env())  # only variables that are not set


def guarded(
    name: str,
    params_path: Path,
    action: Callable[[Params], object],
    errors: Callable[[], tuple[type[Exception], ...]],
    interrupted: str,
    check: Callable[[Params, Path], object] | None = None,
) -> int:
    """Validate params (and `check` them further: the search's section), run `action`, and
    turn expected failures into one-line errors.

    `errors` is called only after the params are valid, so a bad params.yaml is reported
    before the action's heavy imports (torch, optuna) are paid for.
    """
    from pipelines.params import ParamsError, load_params

    try:
        params = load_params(params_path)
        if check is not None:
            check(params, params_path)
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
        if name in ENV_STAGES:
            set_render_env()  # before mujoco is imported: it reads MUJOCO_GL once
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

    return guarded(
        name,
        params_path,
        run,
        lambda: (*_stage_errors(), _UnknownSeedError),
        "earlier outputs were left intact",
    )


def _under_torchrun() -> bool:
    from rlcore.distributed import launched_by_torchrun

    return launched_by_torchrun()


def stage_main(name: str, argv: list[str]) -> int:
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
