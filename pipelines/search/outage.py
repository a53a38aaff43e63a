"""A database that stops answering does not end the search.

Once connected (`pipelines.search.database`), an outage of the server (a restart, a
failover, a cut network) does not end the search: `OutageTolerantStorage` tries every call
that lost its connection again, with backoff, for `search.db_outage_s`, saying once when the
database went away and once when it came back. Only after that long does it raise
`DatabaseUnreachable`, which leaves the study as it was: a trial cut short stays RUNNING,
its heartbeat stops, and the next search fails it and queues it again.
"""

from __future__ import annotations

import copy
import functools
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

FIRST_RETRY_S = 0.25  # the wait after a call's first failure; doubled after each
# The longest wait between two tries: a server that is back is used again within this long.
MAX_RETRY_S = 4.0
# System attribute of every trial in a database: a token of the call that created it, so
# that a creation retried after a lost connection finds the trial it may have committed.
CREATION = "creation"
T = TypeVar("T")


class DatabaseUnreachable(BaseException):
    """The database stayed unreachable for `search.db_outage_s`; the message is one line.

    A BaseException, as KeyboardInterrupt is, so that Optuna does not catch it in a trial
    and try to tell the database that the trial failed (which needs the database).
    """


def last_clause(text: str) -> str:
    """The driver's reason without its preamble: `... failed: FATAL:  reason` -> `reason`."""
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return first.rsplit("failed: ", 1)[-1].removeprefix("FATAL:").strip()


def lost_connection(exc: BaseException) -> bool:
    """Whether `exc`, or an error it wraps (Optuna turns SQLAlchemy's errors into
    `StorageInternalError`), says the connection to the server failed, not a query."""
    driver = sys.modules.get("psycopg")
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DBAPIError) and (
            current.connection_invalidated or isinstance(current, OperationalError | InterfaceError)
        ):
            return True
        if driver is not None and isinstance(current, driver.OperationalError):
            return True
        current = current.__cause__ or current.__context__
    return False


def database_gone(exc: BaseException) -> DatabaseUnreachable | None:
    """The `DatabaseUnreachable` that `exc` is or arose from (Optuna's `UnboundLocalError`
    when its tell was cut short by one), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, DatabaseUnreachable):
            return current
        seen.add(id(current))
        hidden = current.__suppress_context__  # `raise ... from None`: said already
        current = current.__cause__ or (None if hidden else current.__context__)
    return None


def _reason(exc: BaseException) -> str:
    """The driver's reason for a lost connection, in a few words."""
    current: BaseException | None = exc
    while current is not None and not isinstance(current, DBAPIError):
        current = current.__cause__ or current.__context__
    if current is None:
        return last_clause(str(exc))
    return last_clause(str(current.orig) if current.orig is not None else str(current))


class Outage:
    """This process's view of the database's outages, shared by its threads (the trial's
    and Optuna's heartbeat thread): since when calls fail, and when the last outage ended."""

    def __init__(self, url: str, limit_s: float, say: Callable[[str], None]) -> None:
        self.url, self.limit_s, self._say = url, limit_s, say
        self._changed = threading.Condition()  # a call succeeded again, or one gave up
        self._since: float | None = None
        self._ended: float | None = None
        self._gave_up = False

    def call(self, attempt: Callable[[], T]) -> T:
        """`attempt()`, tried again while it fails on a lost connection, for at most
        `limit_s` from the outage's start; then `DatabaseUnreachable`."""
        delay = FIRST_RETRY_S
        while True:
            try:
                result = attempt()
            except Exception as exc:
                if not lost_connection(exc):
                    raise
                left = self._failed(exc)
                if left <= 0:
                    raise DatabaseUnreachable(
                        f"the database at {self.url} has been unreachable for "
                        f"{self.limit_s:g} s; the study is intact: run the search again to resume"
                    ) from None
                with self._changed:  # woken early when another thread gets through
                    self._changed.wait(min(delay, left))
                delay = min(2 * delay, MAX_RETRY_S)
                continue
            self._succeeded()
            return result

    def within(self, seconds: float) -> bool:
        """Whether an outage lasts now or ended less than `seconds` ago."""
        with self._changed:
            ended = self._ended
            return self._since is not None or (
                ended is not None and time.monotonic() - ended < seconds
            )

    def _failed(self, exc: BaseException) -> float:
        """Note a failed call; the seconds left to retry (<= 0: give up)."""
        with self._changed:
            now = time.monotonic()
            if self._since is None:
                self._since = now
                self._say(
                    f"[search] lost the database at {self.url} ({_reason(exc)}): retrying for "
                    f"up to {self.limit_s:g} s (search.db_outage_s)"
                )
            if self._gave_up or now - self._since >= self.limit_s:
                self._gave_up = True
                self._changed.notify_all()
                return 0.0
            return self.limit_s - (now - self._since)

    def _succeeded(self) -> None:
        if self._since is None:  # the common case: no lock taken
            return
        with self._changed:
            if self._since is None:
                return
            now = time.monotonic()
            self._say(f"[search] the database is back after {now - self._since:.1f} s: going on")
            self._since, self._ended, self._gave_up = None, now, False
            self._changed.notify_all()


def _retrying(name: str) -> Callable[..., Any]:
    """RDBStorage's method `name`, tried again through an outage: for calls that may run
    twice (reads; upserts; inserts whose duplicate Optuna ignores)."""
    method = getattr(RDBStorage, name)

    @functools.wraps(method)
    def call(self: OutageTolerantStorage, *args: Any, **kwargs: Any) -> Any:
        return self.outage.call(lambda: method(self, *args, **kwargs))

    return call


class OutageTolerantStorage(RDBStorage):
    """Optuna's RDBStorage whose calls ride out an outage of the server (`Outage.call`).

    Optuna wraps an RDBStorage in its `_CachedStorage` and calls it from the trial's thread
    and from a heartbeat thread; every method that reaches the database is tried again here
    when its connection failed. Reads, attribute and intermediate-value writes (upserts),
    parameters (a duplicate insert Optuna ignores) and heartbeats may simply run twice. Two
    writes may not, when the connection was lost after the server had committed them:

    - Creating a trial would create two (a second retry of a dead worker's trial would be
      counted twice). Each trial is created with a fresh token (system attribute
      `CREATION`) in the same transaction, and a retry first looks for its token. Optuna's
      own creation retries up to 5 times inside, which could duplicate too: this class
      creates with a single transaction per try.
    - Setting a trial's state: a retry first reads the trial back. A finished state it
      already holds (with these values) was ours: True. Claiming a waiting trial (RUNNING)
      is ambiguous when the trial is found RUNNING: the lost attempt or another worker got
      it. It is left to the other (False); if the claim was in fact ours, its heartbeat
      (below) goes stale after `search.grace_s` and the trial is failed and queued again
      like a dead worker's: never run twice at once, never lost.

    Heartbeats: a trial becomes RUNNING (created, or claimed from the queue) in the same
    transaction as its first heartbeat, not when Optuna's heartbeat thread starts later: a
    process that stops in between (killed, or giving up on the database) leaves a trial
    that goes stale and is run again, not one RUNNING for ever. The live workers' beats
    stop during an outage too, so this process reports no stale trial while an outage
    lasts and for `search.grace_s` (plus a beat and a retry) after it saw the outage end;
    by then every live worker has beaten again. A heartbeat thread's call that gives up
    returns quietly: the trial's thread says it.
    """

    def __init__(self, outage: Outage, url: str, **kwargs: Any) -> None:
        self.outage = outage
        # Each failed read is "caught" and logged by Optuna before it fails again: the
        # outage's own lines say it once.
        logging.getLogger("optuna.storages._rdb.storage").addFilter(_without_fallback_notes)
        super().__init__(url, **kwargs)

    create_new_study = _retrying("create_new_study")  # a duplicate: loaded (load_if_exists)
    set_study_user_attr = _retrying("set_study_user_attr")
    set_study_system_attr = _retrying("set_study_system_attr")
    get_study_id_from_name = _retrying("get_study_id_from_name")
    get_study_name_from_id = _retrying("get_study_name_from_id")
    get_study_directions = _retrying("get_study_directions")
    get_study_user_attrs = _retrying("get_study_user_attrs")
    get_study_system_attrs = _retrying("get_study_system_attrs")
    get_all_studies = _retrying("get_all_studies")
    get_trial_user_attrs = _retrying("get_trial_user_attrs")
    get_trial_system_attrs = _retrying("get_trial_system_attrs")
    _set_trial_param = _retrying("_set_trial_param")
    get_trial_param = _retrying("get_trial_param")
    set_trial_intermediate_value = _retrying("set_trial_intermediate_value")
    set_trial_user_attr = _retrying("set_trial_user_attr")
    set_trial_system_attr = _retrying("set_trial_system_attr")
    get_trial_id_from_study_id_trial_number = _retrying("get_trial_id_from_study_id_trial_number")
    get_trial = _retrying("get_trial")
    _get_trials = _retrying("_get_trials")
    _get_best_trial_id = _retrying("_get_best_trial_id")

    def _create_new_trial(
        self, study_id: int, template_trial: FrozenTrial | None = None
    ) -> FrozenTrial:
        token = uuid.uuid4().hex
        template = _tokened(template_trial, token)
        tried = False

        def attempt() -> FrozenTrial:
            nonlocal tried
            if tried:  # the lost try may have committed it
                for trial in RDBStorage._get_trials(self, study_id, None, set(), -1):
                    if trial.system_attrs.get(CREATION) == token:
                        return trial
            tried = True
            if template_trial is None:  # a trial's start: when it is created, not first tried
                template.datetime_start = datetime.now()
            with _create_scoped_session(self.scoped_session) as session:
                # What Optuna's `_create_new_trial` does once: the study's row lock numbers
                # trials one at a time.
                models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
                row = self._get_prepared_new_trial(study_id, template, session)
                if template.state == TrialState.RUNNING:
                    session.add(models.TrialHeartbeatModel(trial_id=row.trial_id))
                created = copy.deepcopy(template)
                created.number, created._trial_id = row.number, row.trial_id
            return created

        return self.outage.call(attempt)

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        tried = False

        def attempt() -> bool:
            nonlocal tried
            if tried:  # the lost try may have committed it
                done = self._state_already_set(trial_id, state, values)
                if done is not None:
                    return done
            tried = True
            if state == TrialState.RUNNING and values is None:
                return self._claim(trial_id)
            return RDBStorage.set_trial_state_values(self, trial_id, state, values)

        return self.outage.call(attempt)

    def _claim(self, trial_id: int) -> bool:
        """Optuna's claim of a waiting trial (`set_trial_state_values(RUNNING)`), with the
        trial's first heartbeat in the same transaction; False if another process has it."""
        with _create_scoped_session(self.scoped_session) as session:
            trial = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
            self.check_trial_is_updatable(trial_id, trial.state)
            if trial.state != TrialState.WAITING:
                return False
            trial.state, trial.datetime_start = TrialState.RUNNING, datetime.now()
            if models.TrialHeartbeatModel.where_trial_id(trial_id, session) is None:
                session.add(models.TrialHeartbeatModel(trial_id=trial_id))
        return True

    def _state_already_set(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None
    ) -> bool | None:
        """After a try whose connection was lost: what it returned if it committed, or None
        to try again (see the class's docstring)."""
        stored = RDBStorage.get_trial(self, trial_id)
        if state == TrialState.RUNNING:
            return None if stored.state == TrialState.WAITING else False
        same_values = values is None or stored.values == list(values)
        return True if stored.state == state and same_values else None

    def record_heartbeat(self, trial_id: int) -> None:
        # Optuna's heartbeat thread would print a traceback and stop beating on an error.
        try:
            self.outage.call(lambda: RDBStorage.record_heartbeat(self, trial_id))
        except DatabaseUnreachable:
            return  # the trial's thread gives up too, and says so

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        assert self.heartbeat_interval is not None
        grace = self.grace_period or 2 * self.heartbeat_interval  # Optuna's default
        quiet_s = grace + self.heartbeat_interval + MAX_RETRY_S
        if self.outage.within(quiet_s):
            return []  # the live workers have not beaten again yet
        stale = self.outage.call(lambda: RDBStorage._get_stale_trial_ids(self, study_id))
        # The query itself may have ridden out an outage this process had not seen before:
        # then every live worker's beat is old too.
        return [] if self.outage.within(quiet_s) else stale


def _tokened(template: FrozenTrial | None, token: str) -> FrozenTrial:
    """`template` (None: a plain new RUNNING trial, as Optuna creates it) with `token`."""
    if template is None:
        return FrozenTrial(
            number=-1,
            state=TrialState.RUNNING,
            value=None,
            datetime_start=datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={CREATION: token},
            intermediate_values={},
            trial_id=-1,
        )
    tokened = copy.deepcopy(template)
    tokened.system_attrs = {**template.system_attrs, CREATION: token}
    return tokened


def _without_fallback_notes(record: logging.LogRecord) -> bool:
    """Drop Optuna's "Caught an error from sqlalchemy ... Falling back" for a query whose
    connection failed (it is an OperationalError; the outage's lines say it)."""
    return not record.getMessage().startswith("Caught an error from sqlalchemy")
