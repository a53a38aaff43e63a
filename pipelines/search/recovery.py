"""Recovery of interrupted trials: those a dead worker left RUNNING, and those a Ctrl-C
failed.

A worker that dies leaves its trial RUNNING. In a database, trials send heartbeats
(`pipelines.search.database`): any worker fails a trial whose heartbeat stopped and runs it
again. The journal has no heartbeat, so trials left RUNNING are failed when a search starts
(not when it joins: `--join`). A trial a Ctrl-C failed is queued again when the search
resumes, so that stopping a study costs no trial its place in `n_trials`. Each runs again
up to `search.retries` times.
"""

from __future__ import annotations

import warnings

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from pipelines.search.storage import has_heartbeat, trial_id
from pipelines.search.trials import INTERRUPTED, replaced_trials


def fail_stale_trials(
    study: optuna.Study, storage: optuna.storages.BaseStorage, retries: int
) -> list[int]:
    """Mark trials left RUNNING (by a killed worker) FAILED and queue each again (up to
    `retries` times); return their numbers. `storage`: the study's (`study_in`).

    With heartbeats, only trials whose heartbeat stopped; without (the journal), every
    RUNNING trial: safe only when no other worker runs, i.e. when a search starts.
    """
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    ids = {t.number: trial_id(storage, study, t.number) for t in running}
    if has_heartbeat(storage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        failed = TrialState.FAIL
        return [t.number for t in running if storage.get_trial(ids[t.number]).state == failed]
    for trial in running:
        storage.set_trial_state_values(ids[trial.number], state=TrialState.FAIL)
        queue_again(study, storage.get_trial(ids[trial.number]), retries)
    return [t.number for t in running]


def requeue_stopped(study: optuna.Study, retries: int) -> list[int]:
    """Queue again (up to `retries` times) the trials a Ctrl-C failed, so that stopping a
    study and resuming it costs their training time but not their place in `n_trials`;
    return their numbers. A trial that failed on its own (a non-finite loss) stays failed."""
    stopped = stopped_trials(study.get_trials(deepcopy=False), retries)
    return [t.number for t in stopped if queue_again(study, t, retries)]


def stopped_trials(trials: list[FrozenTrial], retries: int) -> list[FrozenTrial]:
    """The trials a Ctrl-C failed that a resumed search will run again: not yet replaced
    by a retry, and run fewer than `retries` times again so far."""
    replaced = replaced_trials(trials)
    return [
        t
        for t in trials
        if t.state == TrialState.FAIL
        and t.user_attrs.get(INTERRUPTED)
        and t.number not in replaced
        and len(t.system_attrs.get("retry_history", ())) < retries
    ]


def queue_again(study: optuna.Study, trial: FrozenTrial, retries: int) -> bool:
    """Queue a copy of `trial` with its values, marked as its retry (what the database's
    heartbeat callback writes), unless it already ran `retries` times; whether it did."""
    before = len(study.get_trials(deepcopy=False))
    with warnings.catch_warnings():  # "experimental" since Optuna 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(retries)(study, trial)
    return len(study.get_trials(deepcopy=False)) > before
