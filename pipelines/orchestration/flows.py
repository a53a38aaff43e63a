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
import logging
import re
import subprocess
import sys
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from prefect import Task, flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun

from pipelines.bounded import BoundedInputError, load_json, read_text
from pipelines.compare.regression import Verdict, fresh_seeds, judge, nightly_name, verdict_markdown
from pipelines.layout import Layout
from pipelines.orchestration.portable_markdown import portable
from pipelines.params import Params, load_params
from pipelines.stages.lifeline import kill_with_parent

STAGES = ("train", "evaluate", "video", "report")
REPORT = Layout().report  # relative to the project dir
SEARCH_SUMMARY = Layout().search_reports / "summary.md"
COMPARE_REPORT = Layout().compare_report
SEARCH_DVCFILE = "search/dvc.yaml"  # outside dvc.yaml: a plain `dvc repro` never searches
TAIL_LINES = 20
# DVC's own error lines when another DVC process holds the repo lock or a stage's rwlock.
LOCK_ERRORS = ("Unable to acquire lock", "is busy, it is being blocked by")
# OSErrors that a retry cannot fix: the path is wrong, not the disk or the network.
PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


class StageError(RuntimeError):
    """A stage failed because of its code, params or data: a retry would fail the same way."""


class DvcLockError(RuntimeError):
    """Another DVC process held a lock DVC needed: worth a retry (repro skips finished stages)."""


class RunOutputError(RuntimeError):
    """A file the stages should have written is missing or not in the expected shape."""


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` is I/O that may succeed on a second try (never a stage's own failure)."""
    if isinstance(exc, PERMANENT_OS_ERRORS):
        return False
    return isinstance(exc, DvcLockError | OSError | httpx.TransportError)


def retry_on_io(task: Task[..., Any], task_run: TaskRun, state: State) -> bool:
    """Prefect `retry_condition_fn`: retry transient I/O only.

    Prefect calls it only if it is a plain function (`inspect.isfunction`); a partial or a
    callable object silently disables the retries.
    """
    try:
        state.result()
    except Exception as exc:
        return is_transient(exc)
    return False


def _dvc_env() -> dict[str, str]:
    """The environment of DVC and the stages it runs.

    The venv's `bin` goes first so `python` in `dvc.yaml` is this interpreter even when the venv
    is not activated (a served flow); unbuffered so stage lines stream as they are printed.
    """
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "DVC_NO_ANALYTICS": "1", "PYTHONUNBUFFERED": "1"}


# DVC warnings that a nightly `dvc exp run --temp` on fresh seeds always prints and that
# need no action: the new seeds' outputs have no versions yet to check out, and DVC's own
# .gitignore files beside them stay out of the experiment commit.
EXPECTED_DVC_WARNINGS = (
    "WARNING: No file hash info found for",
    "WARNING: The following untracked files were present in the experiment directory",
)


def _level(line: str) -> int:
    """Keep DVC's own error and warning lines visible as such in the run log."""
    if line.startswith("ERROR:"):
        return logging.ERROR
    if line.startswith(EXPECTED_DVC_WARNINGS):
        return logging.INFO
    return logging.WARNING if line.startswith("WARNING:") else logging.INFO


def _failure(label: str, code: int, tail: deque[str]) -> Exception:
    """The exception for a failed DVC command; its type decides whether Prefect retries."""
    lines = "\n  ".join(tail)
    if any(line.startswith("ERROR:") and any(m in line for m in LOCK_ERRORS) for line in tail):
        return DvcLockError(f"{label}: DVC could not take its lock (exit code {code}):\n  {lines}")
    return StageError(f"{label} failed with exit code {code}; last lines:\n  {lines}")


# DVC itself waits 3 s for its lock; then a quick retry for a short `dvc` command, and two
# longer ones for a concurrent `dvc repro` to finish.
@task(
    task_run_name="{label}",
    retries=3,
    retry_delay_seconds=[2, 15, 60],
    retry_condition_fn=retry_on_io,
    cache_policy=NO_CACHE,  # DVC decides what is stale; no second cache on top
)
def run_dvc(project_dir: str, args: list[str], label: str) -> None:
    """Run `dvc ARGS` in the project, streaming its output into the run log line by line."""
    logger = get_run_logger()
    logger.info("$ dvc %s  (in %s)", " ".join(args), project_dir)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with subprocess.Popen(
        [sys.executable, "-m", "dvc", *args],
        cwd=project_dir,
        env=_dvc_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        preexec_fn=kill_with_parent,  # a killed flow leaves no `dvc repro` (nor its stages)
    ) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            if line := raw.rstrip():
                tail.append(line)
                logger.log(_level(line), "%s", line)
    if process.returncode:
        raise _failure(label, process.returncode, tail)


def _numbers(path: Path) -> dict[str, float]:
    """One metrics file: a JSON object of numbers (nested objects, as DVCLive writes them,
    flattened to `a/b` names)."""
    try:
        data = load_json(read_text(path))  # DVC may restore it from a shared remote: bounded
    except json.JSONDecodeError as exc:
        raise RunOutputError(f"{path}: not valid JSON ({exc})") from None
    except BoundedInputError as exc:
        raise RunOutputError(f"{path}: {exc}") from None
    flat = _flatten(data) if isinstance(data, dict) else None
    if flat is None:
        raise RunOutputError(f"{path}: expected a JSON object of numbers")
    return flat


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, float] | None:
    flat: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            inner = _flatten(value, f"{prefix}{key}/")
            if inner is None:
                return None
            flat |= inner
        elif _is_number(value):
            flat[f"{prefix}{key}"] = value
        else:
            return None
    return flat


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def stage_metrics(project_dir: str, stages: list[str], dvcfile: str = "dvc.yaml") -> list[str]:
    """The JSON metrics files `dvcfile` declares for `stages` (each seed's, for a matrix
    stage), relative to the project: what those stages of this experiment wrote. Declared
    means DVC `metrics:`, or outputs annotated `type: metrics` (per-seed numbers, which
    dvc.yaml keeps out of `dvc exp show`'s columns)."""
    from dvc.repo import Repo

    with Repo(project_dir) as repo:
        declared = repo.stage.collect(str(Path(repo.root_dir, dvcfile)))
        return sorted(
            str(Path(out.fs_path).relative_to(repo.root_dir))
            for stage in declared
            if stage.name.split("@")[0] in stages
            for out in stage.outs
            if (out.metric or out.annot.type == "metrics") and out.fs_path.endswith(".json")
        )


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def read_metrics(project_dir: str, files: list[str]) -> dict[str, dict[str, float]]:
    """Read the metrics files of this run's stages (`stage_metrics`), keyed by file."""
    if not files:
        raise RunOutputError(f"the stages run in {project_dir} declare no JSON metrics")
    missing = [file for file in files if not Path(project_dir, file).is_file()]
    if missing:
        raise RunOutputError(f"{', '.join(missing)} missing: the stages that write them did not")
    return {file: _numbers(Path(project_dir, file)) for file in files}


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def publish_metrics(metrics: dict[str, dict[str, float]], key: str) -> None:
    """Publish the metrics as a table artifact, one row per metric."""
    rows = [
        {"file": file, "name": name, "value": value}
        for file, values in metrics.items()
        for name, value in values.items()
    ]
    create_table_artifact(rows, key=key, description="the metrics files of this run's stages")


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def publish_report(project_dir: str, key: str, report: Path = REPORT) -> None:
    """Publish a Markdown report; its images inlined and its links made absolute paths,
    since Prefect's UI cannot follow paths relative to the report."""
    path = (Path(project_dir) / report).resolve()
    if not path.is_file():
        raise RunOutputError(f"{path} is missing: the stage that writes it did not")
    text = portable(path.read_text(), path.parent)
    create_markdown_artifact(text, key=key, description=f"{report} of this run")


def artifact_key(*parts: str) -> str:
    """An artifact key from free text (Prefect allows lowercase letters, digits and dashes)."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


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


NO_REMOTE = (
    "--push: this project has no default DVC remote: add one with `dvc remote add -d NAME "
    "URL` (a directory for one machine, any DVC remote for many) and commit .dvc/config"
)


def default_remote(root: Path) -> str | None:
    """The project's default DVC remote (`dvc remote default`), or None if it has none."""
    done = subprocess.run(
        [sys.executable, "-m", "dvc", "remote", "default"],
        cwd=root, env=_dvc_env(), capture_output=True, text=True,
    )  # fmt: skip
    name = done.stdout.strip()
    return name if done.returncode == 0 and name else None


class RegressionError(RuntimeError):
    """The nightly run fell outside the baseline's seed band, or could not be judged."""


@task(cache_policy=NO_CACHE)
def judge_nightly(project_dir: str, nightly: str) -> Verdict:
    """Write the compare page of the committed baseline (HEAD) and the nightly experiment,
    and judge the nightly one against the baseline's seed band (reads git; no retry)."""
    from pipelines.compare.page import compare

    baseline, run = compare(Path(project_dir), ["HEAD", nightly]).runs
    return judge(baseline, run)


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def publish_verdict(verdict: Verdict, compare_page: str, key: str) -> None:
    """Publish the verdict as a Markdown artifact whose first line is the verdict."""
    create_markdown_artifact(
        verdict_markdown(verdict, compare_page), key=key, description=verdict.headline()
    )


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
