"""How the search fails: `SearchError`, one line for the user (the CLI prints it, the
study keeps every finished trial), and a database that stayed away turned into one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from pipelines.search.outage import DatabaseUnreachable, database_gone
from pipelines.stages.lifeline import SEARCH_PID_ENV


class SearchError(RuntimeError):
    """The study cannot run as configured (storage, sampler, objective)."""


@contextlib.contextmanager
def database_outage_in_one_line() -> Iterator[None]:
    """Turn a database that stayed unreachable for `search.db_outage_s` into the search's
    one-line error. A worker process that a search started exits quietly with status 1
    instead: its search says it, once for all its processes."""
    try:
        yield
    except BaseException as exc:
        # Also under Optuna's UnboundLocalError, from a tell the outage cut short.
        gone = database_gone(exc) if isinstance(exc, Exception | DatabaseUnreachable) else None
        if gone is None:
            raise
        if os.environ.get(SEARCH_PID_ENV) == str(os.getppid()):
            raise SystemExit(1) from None
        raise SearchError(str(gone)) from None
