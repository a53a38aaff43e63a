"""The experiment as a Prefect flow: DVC runs every stage, Prefect adds the rest.

DVC owns the stage graph, caching and versions; Prefect owns schedules, retries, run history and
artifacts. So each task shells out to `dvc` (a flow run is versioned like a run by hand) and the
stage code never imports Prefect.

Usage:
    python -m pipelines flow [--project-dir D] [--stages S ...] [--variant NAME -S key=value ...]
    python -m pipelines flow --search
    python -m pipelines flow --regression
    python -m pipelines flow --compare [RUN ...]

The schedule that re-runs this flow lives in `pipelines/orchestration/serve.py`.
"""

from __future__ import annotations

import os

# Prefect starts its usage telemetry when it is imported, so opt out before the first import.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from pipelines.compare.regression import Verdict, fresh_seeds, judge, nightly_name
from pipelines.layout import Layout
from pipelines.orchestration.artifacts import (
    COMPARE_REPORT,
    REPORT,
    SEARCH_SUMMARY,
    RunOutputError,
    artifact_key,
    publish_metrics,
    publish_report,
    publish_verdict,
    read_metrics,
)
from pipelines.orchestration.dvc_tasks import (
    LOCK_ERRORS,
    NO_REMOTE,
    PERMANENT_OS_ERRORS,
    TAIL_LINES,
    DvcLockError,
    StageError,
    default_remote,
    is_transient,
    retry_on_io,
    run_dvc,
    stage_metrics,
)
from pipelines.orchestration.server import server_problem
from pipelines.params import Params, load_params

# The tasks and artifacts moved to their own modules; their names stay importable from here.
__all__ = [
    "COMPARE_REPORT",
    "LOCK_ERRORS",
    "NO_REMOTE",
    "PERMANENT_OS_ERRORS",
    "PROJECT_DIR_ENV",
    "REPORT",
    "SEARCH_DVCFILE",
    "SEARCH_SUMMARY",
    "STAGES",
    "TAIL_LINES",
    "DvcLockError",
    "RegressionError",
    "RunOutputError",
    "StageError",
    "artifact_key",
    "checked_params",
    "compare_flow",
    "compare_runs",
    "default_remote",
    "exp_run_args",
    "experiment_flow",
    "flow_main",
    "is_transient",
    "judge_nightly",
    "publish_metrics",
    "publish_report",
    "publish_verdict",
    "read_metrics",
    "regression_flow",
    "retry_on_io",
    "run_dvc",
    "search_flow",
    "select_stages",
    "stage_metrics",
]

STAGES = ("train", "evaluate", "video", "report")
SEARCH_DVCFILE = "search/dvc.yaml"  # outside dvc.yaml: a plain `dvc repro` never searches


def select_stages(stages: list[str] | None) -> list[str]:
    """The requested stages in pipeline order (all by default)."""
    if stages is None:
        return list(STAGES)
    unknown = sorted(set(stages) - set(STAGES))
    if unknown or not stages:
        raise ValueError(f"stages: got {unknown or stages}, choose from {', '.join(STAGES)}")
    return [stage for stage in STAGES if stage in stages]


def exp_run_args(variant: str, overrides: list[str], stages: list[str]) -> list[str]:
    """`dvc exp run` arguments: the whole pipeline unless a subset of stages is asked for."""
    sets = [arg for override in overrides for arg in ("--set-param", override)]
    # Naming the pipeline keeps DVC from checking out the side pipelines (search, collect)
    # too, which warns about the outputs of those never run.
    targets = ["dvc.yaml"] if stages == list(STAGES) else stages
    return ["exp", "run", "--name", variant, *sets, *targets]


# Where a work pool's flow runs find their project: deployments on a pool name none, and each
# worker sets this to its own clone (`python -m pipelines deploy`).
PROJECT_DIR_ENV = "RLPLATFORM_PROJECT_DIR"


def _project_root(project_dir: str | None) -> Path:
    root = Path(project_dir or os.environ.get(PROJECT_DIR_ENV) or ".").resolve()
    if not (root / "dvc.yaml").is_file():
        raise ValueError(f"{root} has no dvc.yaml: the project dir must be the DVC project root")
    return root


@flow(name="experiment")
def experiment_flow(
    project_dir: str | None = None,
    stages: list[str] | None = None,
    variant: str | None = None,
    overrides: list[str] | None = None,
    push: bool | None = None,
) -> dict[str, Any]:
    """Run the experiment's stages through DVC, publish its metrics and report, and push
    its DVC-tracked outputs to the default remote: when the project has one (`push` None),
    always (True: no remote is an error before any stage runs), or never (False).

    Default: one task per stage, `dvc repro <stage>` in pipeline order (each is a no-op when
    DVC finds nothing changed). A named `variant` is one task, `dvc exp run --name VARIANT
    --set-param OVERRIDE ... [stages]`: one experiment is one DVC commit, so per-stage tasks
    would make one experiment per stage (and the second `--name` conflicts). Like `dvc exp run`
    by hand, it leaves the variant in the workspace (params.yaml carries the overrides; dvc.lock
    and outputs are the variant's), which is where the published artifacts come from; `git
    checkout params.yaml dvc.lock && dvc checkout` returns to the committed experiment.
    """
    root = _project_root(project_dir)
    name = load_params(root / "params.yaml").name
    selected = select_stages(stages)
    remote = default_remote(root) if push is not False else None
    if push and remote is None:
        raise ValueError(NO_REMOTE)
    if variant is None:
        if overrides:
            raise ValueError("overrides need a variant name (dvc exp run --name)")
        for stage in selected:
            run_dvc(str(root), ["repro", stage], label=stage)
    else:
        run_dvc(str(root), exp_run_args(variant, overrides or [], selected), f"exp-{variant}")
        get_run_logger().warning(
            "the workspace now holds variant %r, params.yaml included; "
            "`git checkout params.yaml dvc.lock && dvc checkout` restores the committed one",
            variant,
        )
    metrics = read_metrics(str(root), stage_metrics(str(root), selected))
    keys = {"metrics": artifact_key(name, variant or "", "metrics")}
    publish_metrics(metrics, keys["metrics"])
    if "report" in selected:
        keys["report"] = artifact_key(name, variant or "", "report")
        publish_report(str(root), keys["report"])
    if remote is None and push is None:
        get_run_logger().info(
            "no default DVC remote: checkpoints and videos stay in this machine's DVC cache "
            "(`dvc remote add -d NAME URL` shares them; see the guide)"
        )
    else:  # the outputs this run made (or found) go where other machines pull from
        run_dvc(str(root), ["push"], label=f"push-{remote}")
    return {
        "experiment": name,
        "variant": variant,
        "metrics": metrics,
        "artifacts": keys,
        "pushed_to": remote,
    }


class RegressionError(RuntimeError):
    """The nightly run fell outside the baseline's seed band, or could not be judged."""


@task(cache_policy=NO_CACHE)
def judge_nightly(project_dir: str, nightly: str) -> Verdict:
    """Write the compare page of the committed baseline (HEAD) and the nightly experiment,
    and judge the nightly one against the baseline's seed band (reads git; no retry)."""
    from pipelines.compare.page import compare

    baseline, run = compare(Path(project_dir), ["HEAD", nightly]).runs
    return judge(baseline, run)


@flow(name="nightly")
def regression_flow(project_dir: str | None = None) -> dict[str, Any]:
    """The scheduled regression check (see `pipelines.compare.regression`).

    `dvc exp run --temp --name nightly-YYYYMMDD-HHMM -S seeds=[...]` runs the committed
    experiment on fresh seeds in a temporary copy (the workspace is left as it was), the
    compare page sets it beside the baseline, and the verdict is published; a regression
    fails the flow run, so Prefect's notifications on failure cover it.
    """
    root = _project_root(project_dir)
    params = load_params(root / "params.yaml")
    now = datetime.now(UTC)
    name = nightly_name(now)
    seeds = fresh_seeds(len(params.seeds), now.date())
    args = ["exp", "run", "--temp", "--name", name, "-S", f"seeds={json.dumps(seeds)}", "dvc.yaml"]
    run_dvc(str(root), args, label=name)
    verdict = judge_nightly(str(root), name)
    key = artifact_key(params.name, "nightly")
    publish_verdict(verdict, str(root / COMPARE_REPORT), key)
    if not verdict.passed:
        raise RegressionError(verdict.headline())
    get_run_logger().info("%s", verdict.headline())
    return {
        "experiment": params.name,
        "variant": name,
        "seeds": seeds,
        "verdict": verdict.headline(),
        "metrics": {},
        "artifacts": {"verdict": key},
    }


@flow(name="search")
def search_flow(project_dir: str = ".") -> dict[str, Any]:
    """Run the Optuna search stage through DVC and publish its summary.

    `dvc repro search/dvc.yaml` (the stage lives outside the default pipeline, so a plain
    `dvc repro` never starts a search); the study resumes from its storage, so a retried or
    re-scheduled flow run only adds the trials the study lacks.
    """
    root = _project_root(project_dir)
    from pipelines.search.space import search_section

    name = search_section(load_params(root / "params.yaml")).study_name
    run_dvc(str(root), ["repro", SEARCH_DVCFILE], label="search")
    # The study's summary is a plain output of the stage (search/dvc.yaml says why).
    summary = str(Layout(root).search_metrics.relative_to(root))
    files = sorted({*stage_metrics(str(root), ["search"], SEARCH_DVCFILE), summary})
    metrics = read_metrics(str(root), files)
    keys = {"metrics": artifact_key(name, "search", "metrics")}
    publish_metrics(metrics, keys["metrics"])
    keys["summary"] = artifact_key(name, "search", "summary")
    publish_report(str(root), keys["summary"], SEARCH_SUMMARY)
    return {"study": name, "metrics": metrics, "artifacts": keys}


@task(cache_policy=NO_CACHE)
def compare_runs(project_dir: str, runs: list[str]) -> dict[str, Any]:
    """Write the comparison pages (reads git and DVC; a failure is not worth a retry)."""
    from pipelines.compare.page import compare, problems_of

    page = compare(Path(project_dir), runs)
    return {
        "runs": [run.label for run in page.runs],
        "differing_params": page.param_keys,
        "problems": [f"{run.label}: {p}" for run in page.runs for p in problems_of(run)],
    }


@flow(name="compare")
def compare_flow(project_dir: str = ".", runs: list[str] | None = None) -> dict[str, Any]:
    """Compare runs (`python -m pipelines compare`) and publish the page as an artifact.

    Not a DVC stage: it reads every experiment and revision, not one pipeline's inputs.
    """
    root = _project_root(project_dir)
    name = load_params(root / "params.yaml").name
    result = compare_runs(str(root), list(runs or []))
    key = artifact_key(name, "compare")
    publish_report(str(root), key, COMPARE_REPORT)
    return {**result, "metrics": {}, "artifacts": {"compare": key}}


def _flow_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines flow",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the usage lines apart
    )
    parser.add_argument("--project-dir", default=".", help="the DVC project root (default .)")
    parser.add_argument("--stages", nargs="+", choices=STAGES, help="default: all, in order")
    parser.add_argument("--variant", help="run as the DVC experiment NAME (dvc exp run)")
    parser.add_argument(
        "--search", action="store_true", help="run the Optuna search stage instead (search flow)"
    )
    parser.add_argument(
        "--regression", action="store_true",
        help="run the nightly regression check instead: the experiment on fresh seeds as a "
        "dated DVC experiment, judged against the committed baseline",
    )  # fmt: skip
    parser.add_argument(
        "--compare", nargs="*", metavar="RUN",
        help="compare runs instead (compare flow): experiment names, git revisions, workspace",
    )  # fmt: skip
    parser.add_argument(
        "-S", "--set-param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a param for the variant (dvc exp run -S); needs --variant",
    )  # fmt: skip
    parser.add_argument(
        "--push", action=argparse.BooleanOptionalAction, default=None,
        help="dvc push the outputs after the stages (default: when a default remote is set; "
        "--push without one is an error)",
    )  # fmt: skip
    return parser


def checked_params(
    project_dir: str | Path, params_path: Path | None = None, for_search: bool = False
) -> Params | None:
    """Check the project before paying for Prefect's start-up; print the problem if any."""
    try:
        root = _project_root(str(project_dir))
        path = params_path or root / "params.yaml"
        params = load_params(path)
        if for_search:
            from pipelines.search.space import checked_search

            checked_search(params, path)
        return params
    except ValueError as exc:  # ParamsError included
        print(f"error: {exc}", file=sys.stderr)
        return None


def flow_main(argv: list[str] | None = None) -> int:
    """`python -m pipelines flow`: run the experiment flow once."""
    parser = _flow_parser()
    args = parser.parse_args(argv)
    if args.overrides and not args.variant:
        parser.error("-S/--set-param needs --variant NAME (the DVC experiment to create)")
    if args.search and (args.variant or args.stages):
        parser.error("--search runs the search stage alone: drop --stages/--variant")
    if args.compare is not None and (args.variant or args.stages or args.search):
        parser.error("--compare runs alone: drop --stages/--variant/--search")
    if args.regression and (args.variant or args.stages or args.search or args.compare is not None):
        parser.error("--regression runs alone: drop --stages/--variant/--search/--compare")
    if args.push is not None and (args.search or args.regression or args.compare is not None):
        parser.error("--push/--no-push apply to the experiment flow: drop them")
    if checked_params(args.project_dir, for_search=args.search) is None:
        return 2
    if args.push and default_remote(Path(args.project_dir)) is None:
        print(f"error: {NO_REMOTE}", file=sys.stderr)
        return 2
    problem = server_problem(required=False)  # none configured: the run starts its own
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.search:
        state = search_flow(project_dir=args.project_dir, return_state=True)
    elif args.regression:
        state = regression_flow(project_dir=args.project_dir, return_state=True)
    elif args.compare is not None:
        state = compare_flow(project_dir=args.project_dir, runs=args.compare, return_state=True)
    else:
        state = experiment_flow(
            project_dir=args.project_dir,
            stages=args.stages,
            variant=args.variant,
            overrides=args.overrides,
            push=args.push,
            return_state=True,
        )
    result = state.result(raise_on_failure=False)
    if not state.is_completed():
        print(f"error: {result}", file=sys.stderr)
        return 1
    for file, values in result["metrics"].items():
        print("  ".join([file, *(f"{name}={value:g}" for name, value in values.items())]))
    if "verdict" in result:
        print(result["verdict"])
    if "runs" in result:
        print(f"compared {', '.join(result['runs'])}: {COMPARE_REPORT}")
    return 0
