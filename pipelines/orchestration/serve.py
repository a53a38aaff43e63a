"""`python -m pipelines serve`: a flow as a deployment on the params' schedule.

Registers the flow `schedule.flow` names (the regression check by default, or the plain
experiment flow) with the cron schedule of `params.yaml` (`schedule:` section) against a
running Prefect server and executes its scheduled runs until stopped (Ctrl-C).
"""

from __future__ import annotations

import os

# Prefect starts its usage telemetry when it is imported, so opt out before the first import.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import argparse
import asyncio
import signal
import sys
from datetime import timedelta
from pathlib import Path

from prefect import serve
from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron, Interval, Schedule
from prefect.types.entrypoint import EntrypointType
from pydantic import ValidationError

from pipelines.orchestration.flows import checked_params, experiment_flow, regression_flow
from pipelines.orchestration.server import server_problem
from pipelines.params import ScheduleParams


def describe_schedule(schedule: ScheduleParams, interval_seconds: float | None) -> str:
    """The schedule in words with its next run; raises ValueError for a bad cron or timezone."""
    if interval_seconds is not None:
        return f"every {interval_seconds:g} s"
    from prefect.server.schemas.schedules import CronSchedule

    try:
        cron = CronSchedule(cron=schedule.cron, timezone=schedule.timezone)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise ValueError(f"schedule: {message}") from None
    (next_run,) = asyncio.run(cron.get_dates(n=1))
    return f"cron {schedule.cron!r} ({schedule.timezone}), next run {next_run.isoformat()}"


def build_deployment(
    project_dir: Path, schedule: ScheduleParams, interval_seconds: float | None = None
) -> RunnerDeployment:
    """The deployment of `schedule.flow` for the pipeline of `project_dir`, on schedule."""
    when: Schedule = (
        Interval(timedelta(seconds=interval_seconds))
        if interval_seconds is not None
        else Cron(schedule.cron, timezone=schedule.timezone)
    )
    chosen = regression_flow if schedule.flow == "regression" else experiment_flow
    return chosen.to_deployment(
        name=schedule.deployment,
        schedules=[when],
        parameters={"project_dir": str(project_dir)},
        description=f"The {schedule.flow} flow of the DVC pipeline of {project_dir}, on schedule.",
        entrypoint_type=EntrypointType.MODULE_PATH,  # pipelines is installed; paths may differ
    )


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipelines serve", description=__doc__)
    parser.add_argument("--project-dir", type=Path, default=Path("."))
    parser.add_argument("--params", type=Path, help="default: PROJECT_DIR/params.yaml")
    parser.add_argument(
        "--interval-seconds", type=float, help="run every N s instead of schedule.cron (testing)"
    )
    return parser


def serve_main(argv: list[str] | None = None) -> int:
    """`python -m pipelines serve`: register the scheduled deployment and run it until stopped."""
    parser = _serve_parser()
    args = parser.parse_args(argv)
    if args.interval_seconds is not None and args.interval_seconds <= 0:
        parser.error(f"--interval-seconds must be > 0, got {args.interval_seconds:g}")
    project = args.project_dir.resolve()
    params_path = args.params or project / "params.yaml"
    params = checked_params(project, params_path)
    if params is None:
        return 2
    schedule = params.schedule
    try:
        when = describe_schedule(schedule, args.interval_seconds)
    except ValueError as exc:
        print(f"error: {params_path}: {exc}", file=sys.stderr)
        return 2
    problem = server_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    deployment = build_deployment(project, schedule, args.interval_seconds)
    flow_name = "nightly" if schedule.flow == "regression" else "experiment"
    print(f"serving deployment '{flow_name}/{deployment.name}' for {project}: {when}", flush=True)
    # A shell starts a background job (`serve &`) with SIGINT ignored, and Python leaves an
    # ignored SIGINT ignored: neither Ctrl-C after `fg` nor `kill -INT` would stop it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    serve(deployment, print_starting_message=False)
    return 0
