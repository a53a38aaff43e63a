"""One worker of a search: a process that runs trials of the study until it has
`search.n_trials` or `search.timeout_s` passes (`--workers N` runs N against the same
storage; `--join` adds one from anywhere that reaches it).

In a database, a worker whose study is full waits for the other workers' last trials, so
that none is lost: it runs again any whose worker dies (its heartbeat stops).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.search.errors import SearchError, database_outage_in_one_line
from pipelines.search.objective import Train, TrialTakenOver, objective
from pipelines.search.recovery import fail_stale_trials
from pipelines.search.space import SearchParams, search_section
from pipelines.search.storage import has_heartbeat, make_storage
from pipelines.search.study import make_sampler, study_in
from pipelines.search.trial_checkpoints import trial_checkpoints
from pipelines.search.trials import (
    FINISHED,
    INFEASIBLE,
    INTERRUPTED,
    finished_trials,
    retry_of,
    started_trials,
    trial_seconds,
)
from pipelines.stages.progress import Progress
from pipelines.stages.train import run_training
from rlcore.errors import NonFiniteError
from rlcore.runtime import configure_cpu

WAIT_POLL_S = 5.0  # how often a worker whose study is full looks at the others' trials


@database_outage_in_one_line()
def run_worker(
    params: Params, layout: Layout, worker: int = 0, train: Train = run_training
) -> None:
    """Run trials in this process until the study has `n_trials` or the timeout passes.

    `worker` numbers the process within the search (its sampler seed, `worker_seed`). With
    heartbeats, a worker whose study is full stays while other workers' trials run, and
    re-runs any whose worker dies; one whose own trial was failed meanwhile (its heartbeat
    stalled past `search.grace_s`) leaves that trial to its retry and goes on. `train`
    trains each seed of a trial (`objective`).
    """
    configure_cpu(params.runtime.threads)
    search = search_section(params)
    storage = make_storage(search, layout, wait=True)  # the search has reached it
    study = study_in(storage, search, worker)
    if search.n_trials - len(started_trials(study)) <= 0 and not _others_running(study, storage):
        return
    # A resumed study draws afresh: its seed counts every ended trial, replaced ones too.
    ended = len(study.get_trials(deepcopy=False, states=FINISHED))
    study.sampler = make_sampler(search, worker, ended)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for handler in logging.getLogger("optuna").handlers:
        handler.addFilter(_without_interrupt_tracebacks)
    progress = Progress("search", search.n_trials, "trials", initial=len(finished_trials(study)))
    run = objective(params, storage, train, progress.note, trial_checkpoints(layout, search))
    callbacks = [_progress(search.n_trials, progress), _stop_at_total(search.n_trials)]
    deadline = None if search.timeout_s is None else time.monotonic() + search.timeout_s
    waiting_said = False
    try:
        while deadline is None or time.monotonic() < deadline:
            missing = search.n_trials - len(started_trials(study))
            if missing > 0:
                taken = _optimize(study, run, missing, deadline, callbacks)
                if taken is not None:
                    _go_on_after_takeover(taken, has_heartbeat(storage), search, progress)
                continue
            if not _others_running(study, storage):
                break
            if not waiting_said:
                progress.note(
                    "[search] the study is full; waiting for the other workers' trials "
                    "(a trial whose worker dies is run again here)"
                )
                waiting_said = True
            time.sleep(min(search.heartbeat_s, WAIT_POLL_S))
            for number in fail_stale_trials(study, storage, search.retries):
                progress.note(f"[search] trial {number}'s worker stopped beating: queued again")
    finally:
        progress.close()


def _optimize(
    study: optuna.Study,
    run: Callable[[optuna.Trial], float],
    missing: int,
    deadline: float | None,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]],
) -> int | None:
    """Run up to `missing` trials of the study; the number of this worker's trial that
    another process failed meanwhile (which stopped them), else None."""
    try:
        study.optimize(
            run,
            n_trials=missing,
            timeout=None if deadline is None else deadline - time.monotonic(),
            catch=(NonFiniteError,),
            callbacks=callbacks,
            gc_after_trial=False,
        )
    except TrialTakenOver as taken:
        return taken.args[0]
    return None


def _go_on_after_takeover(
    number: int, heartbeat: bool, search: SearchParams, progress: Progress
) -> None:
    """Say that this worker's trial `number` was failed by another process; with
    heartbeats, the worker goes on (another worker failed the trial and queued it again),
    without, it stops (a search started while it ran)."""
    if not heartbeat:
        raise SearchError(
            f"this worker's trial {number} was marked failed by another process (a search "
            f"started while it ran); the worker stops, the study keeps every finished trial"
        )
    progress.note(
        f"[search] trial {number} was failed by another worker (no heartbeat for "
        f"{search.grace_s}s) and queued again; going on"
    )


def _without_interrupt_tracebacks(record: logging.LogRecord) -> bool:
    """Drop Optuna's "trial failed" record, traceback and all, for a trial that Ctrl-C
    stopped (the search says once that it was interrupted), and its "failed with value
    None" after any failure (the search's progress line says the trial failed)."""
    if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
        return False
    return not record.getMessage().endswith(" failed with value None.")


def _others_running(study: optuna.Study, storage: optuna.storages.BaseStorage) -> bool:
    """Trials of other workers whose end this worker must wait for: only with heartbeats
    (without, a dead worker's trial never ends, and nothing could retry it)."""
    return has_heartbeat(storage) and bool(
        study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    )


def _progress(n_trials: int, progress: Progress) -> Callable[[optuna.Study, FrozenTrial], None]:
    """A line per ended trial of this worker, and the study's count for the progress bar."""

    def show(study: optuna.Study, trial: FrozenTrial) -> None:
        done = len(finished_trials(study))
        value = "" if trial.value is None else f" value {trial.value:.4g}"
        seconds = trial_seconds(trial)
        wall = float("nan") if seconds is None else seconds
        shown = ", ".join(f"{k}={v}" for k, v in trial.params.items())
        original = retry_of(trial)
        retry = (
            ""
            if original is None
            else f" (a retry of trial {original}, {_why_retried(study, original)})"
        )
        why = trial.user_attrs.get(INFEASIBLE)
        state = trial.state.name.lower() + (f" ({why})" if why else "")
        progress.note(
            f"[search] trial {trial.number}{retry} {state}{value} in "
            f"{wall:.1f}s ({done}/{n_trials} finished): {shown}"
        )
        progress.update(done)  # trials of every worker: the study's rate and ETA

    return show


def _why_retried(study: optuna.Study, original: int) -> str:
    stopped = study.get_trials(deepcopy=False)[original].user_attrs.get(INTERRUPTED)
    return "which a Ctrl-C stopped" if stopped else "whose worker died"


def _stop_at_total(n_trials: int) -> Callable[[optuna.Study, FrozenTrial], None]:
    """Stop this worker once the study holds `n_trials` trials (finished or running)."""

    def stop(study: optuna.Study, trial: FrozenTrial) -> None:
        if len(started_trials(study)) >= n_trials:
            study.stop()

    return stop
