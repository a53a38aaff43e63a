"""`python -m pipelines deploy --pool NAME`: the flows as deployments on a Prefect work pool.

Registers two deployments on an existing process work pool, so that workers on any machine
(`prefect worker start --pool NAME` in their own clone) run them:

- `experiment/<schedule.deployment>-on-demand`: the experiment flow, run when asked
  (`prefect deployment run 'experiment/nightly-on-demand'`, or the UI);
- the scheduled one, `nightly/<schedule.deployment>` (or `experiment/...` with
  `schedule.flow: experiment`), on `schedule.cron`.

Neither names a project directory: a worker's flow runs use the clone in
`RLPLATFORM_PROJECT_DIR` (set it when starting the worker), else the worker's working
directory. The flows are found by module path (`pipelines.orchestration.flows`), so the
worker's venv must have this package installed (`make setup` in its clone). Deployments made
before the flows moved here name their old module (`pipelines.flows`), which no
longer exists: deploy them again (`python -m pipelines deploy`).
"""

from __future__ import annotations

import os

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import argparse
import sys
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.deployments.runner import RunnerDeployment
from prefect.exceptions import ObjectNotFound
from prefect.schedules import Cron
from prefect.types.entrypoint import EntrypointType

from pipelines.orchestration.flows import (
    PROJECT_DIR_ENV,
    checked_params,
    experiment_flow,
    regression_flow,
)
from pipelines.orchestration.serve import describe_schedule
from pipelines.orchestration.server import server_problem
from pipelines.params import ScheduleParams


def pool_problem(pool: str) -> str | None:
    """Why `pool` cannot take the deployments, or None when it is a process work pool."""
    try:
        with get_client(sync_client=True) as client:
            found = client.read_work_pool(pool)
    except ObjectNotFound:
        return (
            f"--pool: the work pool {pool!r} does not exist; create it with "
            f"`prefect work-pool create {pool} --type process`"
        )
    if found.type != "process":
        return (
            f"--pool: {pool!r} is a {found.type!r} work pool; these deployments run as local "
            f"processes of a worker's clone: use a `process` pool"
        )
    return None


def pool_deployments(schedule: ScheduleParams) -> list[RunnerDeployment]:
    """The on-demand experiment deployment and the scheduled one, without a project dir."""
    scheduled = regression_flow if schedule.flow == "regression" else experiment_flow
    common = {
        "entrypoint_type": EntrypointType.MODULE_PATH,
        "parameters": {},  # the worker's clone: RLPLATFORM_PROJECT_DIR or its working dir
    }
    return [
        experiment_flow.to_deployment(
            name=f"{schedule.deployment}-on-demand",
            description="The experiment flow (dvc repro, metrics, report, dvc push) of the "
            "worker's clone, when asked.",
            **common,
        ),
        scheduled.to_deployment(
            name=schedule.deployment,
            schedules=[Cron(schedule.cron, timezone=schedule.timezone)],
            description=f"The {schedule.flow} flow of the worker's clone, on schedule.",
            **common,
        ),
    ]


def deploy_main(argv: list[str] | None = None) -> int:
    """Register the deployments on `--pool`; 0 done, 2 bad input (one line each)."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines deploy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pool", required=True, help="an existing process work pool")
    parser.add_argument("--project-dir", type=Path, default=Path("."))
    parser.add_argument("--params", type=Path, help="default: PROJECT_DIR/params.yaml")
    args = parser.parse_args(argv)
    project = args.project_dir.resolve()
    params = checked_params(project, args.params or project / "params.yaml")
    if params is None:
        return 2
    try:
        when = describe_schedule(params.schedule, None)
    except ValueError as exc:
        print(f"error: {args.params or project / 'params.yaml'}: {exc}", file=sys.stderr)
        return 2
    problem = server_problem() or pool_problem(args.pool)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    for deployment in pool_deployments(params.schedule):
        deployment.apply(work_pool_name=args.pool)
        print(f"deployed '{deployment.flow_name}/{deployment.name}' on pool {args.pool!r}")
    print(f"schedule: {when}")
    print(
        f"on each machine, in its clone: {PROJECT_DIR_ENV}=$PWD prefect worker start "
        f"--pool {args.pool}  (with PREFECT_API_URL pointing at this server)"
    )
    return 0
