"""The search's database storage (`search.storage`: a SQLAlchemy URL, e.g. PostgreSQL).

Workers on many machines share one study there. Each running trial writes a heartbeat every
`search.heartbeat_s`; a trial silent for `search.grace_s` belongs to a worker that died
(killed, out of memory, a lost machine), and the next worker to start a trial fails it and
queues a copy, up to `search.retries` times (Optuna's heartbeat and its
`RetryHeartbeatStaleTrialCallback`). So workers may start and stop in any order: none ever
fails the trial of a worker that is alive, which the journal file, having no heartbeat,
cannot promise.

Connecting fails in one line that names `search.storage` (password hidden) and what to do:
a missing driver, an unreachable server, a refused login, a missing database. Once
connected, its calls ride out an outage of the server (`pipelines.search.outage`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, NoSuchModuleError, SQLAlchemyError

from pipelines.search.outage import Outage, OutageTolerantStorage, last_clause

CONNECT_TIMEOUT_S = 10  # an unreachable host fails in this long instead of hanging
POSTGRES_EXTRA = "pip install -e '.[postgres]' (psycopg)"


class StorageError(RuntimeError):
    """The study's database cannot be used; the message is one line for the user."""


def shown_url(url: str) -> str:
    """The URL as it may be printed: the password masked."""
    return make_url(url).render_as_string(hide_password=True)


def database_storage(
    url: str,
    heartbeat_s: int,
    grace_s: int,
    retries: int,
    outage_s: float,
    *,
    wait: bool = False,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> optuna.storages.BaseStorage:
    """Open (and on first use create) the study tables at `url`, with heartbeats; its calls
    ride out an outage of up to `outage_s` seconds, which `say` announces.

    `wait`: the database was reachable a moment ago (a worker of a search that opened it):
    a server that does not answer is waited for like an outage, not an error in the URL.
    """
    parsed = make_url(url)
    engine_kwargs: dict[str, object] = {"pool_pre_ping": True}  # survive hours-long trials
    if parsed.get_backend_name() == "postgresql":
        engine_kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    outage = Outage(shown_url(url), outage_s, say)

    def connect() -> OutageTolerantStorage:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna since 2.x
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return OutageTolerantStorage(
                outage,
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_s,
                grace_period=grace_s,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(retries),
            )

    try:
        return outage.call(connect) if wait else connect()
    except ImportError:
        raise StorageError(_missing_driver(url)) from None
    except DBAPIError as exc:
        raise StorageError(_refused(url, exc)) from None
    except NoSuchModuleError:
        raise StorageError(
            f"search.storage {shown_url(url)}: SQLAlchemy knows no database "
            f"{parsed.drivername!r}: write e.g. postgresql+psycopg://user:password@host:5432/"
            f"optuna, or null for the journal file"
        ) from None
    except SQLAlchemyError as exc:
        raise StorageError(
            f"search.storage {shown_url(url)}: cannot open the study database: "
            f"{last_clause(str(exc))}"
        ) from None


def _missing_driver(url: str) -> str:
    parsed = make_url(url)
    driver = parsed.get_driver_name()
    if parsed.get_backend_name() != "postgresql":
        fix = f"install {driver}"
    elif driver == "psycopg":
        fix = POSTGRES_EXTRA
    else:
        fix = f"pip install {driver}, or write postgresql+psycopg:// and {POSTGRES_EXTRA}"
    return f"search.storage {shown_url(url)}: its driver {driver!r} is not installed: {fix}"


def _refused(url: str, exc: DBAPIError) -> str:
    """One line for a server that cannot be reached or refuses us, from the driver's text."""
    parsed, shown = make_url(url), shown_url(url)
    text = str(exc.orig) if exc.orig is not None else str(exc)
    where = f"{parsed.host or 'localhost'}:{parsed.port or 'default port'}"
    if "password authentication failed" in text or "no password supplied" in text:
        return (
            f"search.storage {shown}: the server at {where} refused user {parsed.username!r} "
            f"(password authentication failed): fix the user or password (in the URL, or "
            f"PGPASSWORD or ~/.pgpass)"
        )
    if "does not exist" in text and f'database "{parsed.database}"' in text:
        return (
            f"search.storage {shown}: database {parsed.database!r} does not exist on {where}: "
            f"create it (CREATE DATABASE {parsed.database};) or name an existing one"
        )
    if any(
        reason in text
        for reason in ("Connection refused", "failed to resolve host", "timeout expired",
                       "No route to host", "Network is unreachable", "could not translate")
    ):  # fmt: skip
        reason = last_clause(text)
        return (
            f"search.storage {shown}: cannot reach the database server at {where} ({reason}): "
            f"start it, or fix the host and port in the URL"
        )
    return f"search.storage {shown}: cannot open the study database: {last_clause(text)}"
