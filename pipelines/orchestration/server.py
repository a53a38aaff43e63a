"""Whether the Prefect server `PREFECT_API_URL` names answers: one line saying what to do
where it does not, before a flow, a deployment or a schedule needs it."""

from __future__ import annotations

from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL

START_SERVER = (
    "start one with `prefect server start --host 127.0.0.1` and "
    "`export PREFECT_API_URL=http://127.0.0.1:4200/api`"
)


def server_problem(required: bool = True) -> str | None:
    """Why the configured Prefect server cannot be used, or None when it answers. Unless
    `required`, no server configured is fine (a flow run alone starts its own)."""
    url = PREFECT_API_URL.value()
    if not url:
        if not required:
            return None
        return f"no Prefect server is configured (PREFECT_API_URL is unset): {START_SERVER}"
    with get_client(sync_client=True) as client:
        error = client.api_healthcheck()
    if error is not None:
        return f"the Prefect server at {url} does not answer ({error}): {START_SERVER}"
    return None
