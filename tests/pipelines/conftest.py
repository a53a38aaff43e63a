"""One throwaway Prefect server for every pipelines test that needs one (it costs 13-25 s)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def prefect_api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run the session's Prefect calls against a temporary server and SQLite file; yield its URL.

    Flow results are persisted (to a temporary folder): a loaded machine can hold the test
    server's SQLite file locked for its whole 60 s busy timeout, and a flow whose final state
    then comes back from the API carries no result in memory (`MissingResult`); persisted,
    `state.result()` reads it from storage instead."""
    if importlib.util.find_spec("prefect") is None:
        pytest.skip("prefect is not installed (pip install -e .)")
    # Before the first `import prefect`: no telemetry, and patience with slow CI machines.
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
    os.environ.setdefault("PREFECT_RESULTS_PERSIST_BY_DEFAULT", "true")
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(tmp_path_factory.mktemp("results")))
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield PREFECT_API_URL.value()


@pytest.fixture(scope="session")
def git_dvc_env() -> dict[str, str]:
    """Environment for real git and DVC runs in throwaway repos: this venv first on PATH,
    no analytics, a fixed committer, and no PYTHONPATH (stages import the copied code)."""
    import sys
    from pathlib import Path

    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }
    env.pop("PYTHONPATH", None)
    return env
