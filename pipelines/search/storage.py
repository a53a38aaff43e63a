"""The study's storage, as `search.storage` names it: by default Optuna's journal file
`outputs/search/journal.log` (a persistent DVC output); a path names a journal file of the
study's own (one that can be committed, so that any clone resumes the study); any
SQLAlchemy URL (e.g. PostgreSQL) is a database shared by workers on several machines
(`pipelines.search.journal`, `pipelines.search.database`).

The search keeps the storage it made and reads a trial's state there through Optuna's
public storage methods (another process may have failed the trial meanwhile).
"""

from __future__ import annotations

from pathlib import Path

import optuna

from pipelines.layout import Layout
from pipelines.search.database import StorageError, database_storage
from pipelines.search.errors import SearchError
from pipelines.search.journal import journal_storage
from pipelines.search.space import SearchParams, is_journal_path


def journal_path(search: SearchParams, layout: Layout) -> Path | None:
    """The study's journal file (the default one, or `search.storage` when it is a path,
    relative to the project); None for a database."""
    if search.storage is None:
        return layout.search_journal
    if is_journal_path(search.storage):
        path = layout.root / search.storage
        resolved, root = path.resolve(), layout.root.resolve()
        if not search.allow_outside_repo and not resolved.is_relative_to(root):
            raise SearchError(
                f"search.storage: {search.storage} resolves to {resolved}, outside the "
                f"repository {root}; set search.allow_outside_repo: true to keep the study "
                "there (nothing was run)"
            )
        return path
    return None


def make_storage(
    search: SearchParams, layout: Layout, wait: bool = False
) -> optuna.storages.BaseStorage:
    """The study's storage; `wait`: for a database the search has reached already, wait
    for a server that does not answer (`search.db_outage_s`) instead of failing."""
    journal = journal_path(search, layout)
    if journal is not None:
        return journal_storage(journal)
    if search.storage is not None:
        try:
            return database_storage(
                search.storage,
                search.heartbeat_s,
                search.grace_s,
                search.retries,
                search.db_outage_s,
                wait=wait,
            )
        except StorageError as exc:
            raise SearchError(str(exc)) from None
    raise AssertionError("unreachable: no journal and no database")


def has_heartbeat(storage: optuna.storages.BaseStorage) -> bool:
    """Whether the storage's trials send heartbeats (a database, Optuna's RDBStorage with a
    heartbeat interval; not the journal)."""
    return (
        isinstance(storage, optuna.storages.RDBStorage)
        and storage.get_heartbeat_interval() is not None
    )


def trial_id(storage: optuna.storages.BaseStorage, study: optuna.Study, number: int) -> int:
    """The storage's id of the study's trial `number`."""
    study_id = storage.get_study_id_from_name(study.study_name)
    return storage.get_trial_id_from_study_id_trial_number(study_id, number)
