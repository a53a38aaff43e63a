"""The `search` stage: an Optuna study over `params.yaml`'s `search.space`.

A search readies the study (`_prepare_study`: the recovery of interrupted trials,
`search.enqueue`), runs trials in this process and in `--workers N` - 1 more (`worker`,
`processes`), each trial trained by the same function as the `train` stage (`objective`),
then writes the study's reports (`reports`) and `metrics/search.json`. The study lives in
`search.storage` (`storage`); `search.n_trials` is the study's total: a resumed study runs
only the trials it lacks.

A database that stops answering (a restart, a failover) is waited for, up to
`search.db_outage_s`, by every process of the search (`pipelines.search.outage`): trials
go on when it is back. After that long the search stops in one line (its workers quietly,
the search for them), and a new search resumes the study.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from pipelines.files import write_json
from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.search.errors import SearchError, database_outage_in_one_line
from pipelines.search.journal import recover_journal
from pipelines.search.objective import Train
from pipelines.search.processes import check_nothing_lost, start_workers, wait_for_workers
from pipelines.search.recovery import fail_stale_trials, requeue_stopped
from pipelines.search.reports import write_reports
from pipelines.search.sampling import enqueue
from pipelines.search.space import SearchParams, search_section
from pipelines.search.storage import has_heartbeat, journal_path, make_storage
from pipelines.search.study import open_study, study_in
from pipelines.search.trial_checkpoints import drop_stale_checkpoints, trial_checkpoints
from pipelines.search.trials import started_trials
from pipelines.search.worker import run_worker
from pipelines.stages.train import run_training
from rlcore.envs import make_env
from rlcore.trained import build_policy


def _check_experiment_builds(params: Params) -> None:
    """Build the base experiment's env and policy once, so a setting no trial could use
    (an unknown env option, an unavailable device, SAC on discrete actions) fails before
    the study starts, not in trial 0."""
    cfg = params.experiment()
    env = make_env(cfg.env, num_envs=1)
    try:
        build_policy(cfg, env)
    finally:
        env.close()


@database_outage_in_one_line()
def search(
    params: Params,
    layout: Layout | None = None,
    workers: int = 1,
    join: bool = False,
    params_path: Path = Path("params.yaml"),
    train: Train = run_training,
) -> dict[str, Any]:
    """Run the study with `workers` local processes, then write its reports. The search
    section is checked against the experiment where a search starts (the CLI's
    `checked_search`), not again here: that check trains nothing but parses every extreme.
    `train` trains the trials of this process (`run_worker`; its worker processes train
    with `run_training`)."""
    section = search_section(params, params_path)
    layout = layout or Layout()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not section.space:
        raise SearchError("search.space is empty: add at least one parameter to search")
    if workers < 1:
        raise SearchError(f"--workers must be >= 1, got {workers}")
    start = time.perf_counter()
    _check_experiment_builds(params)
    _prepare_study(section, layout, join, workers)
    extra = start_workers(params_path, layout, workers)
    stopped_by: KeyboardInterrupt | None = None
    try:
        # A joining search samples apart from the study's first process: its pid seeds it.
        run_worker(params, layout, worker=os.getpid() if join else 0, train=train)
    except KeyboardInterrupt as exc:  # a Ctrl-C, or SIGTERM's `Terminated`
        stopped_by = exc
    finally:
        codes, stopped_by = wait_for_workers(extra, stop=stopped_by)
    study = open_study(params, layout, wait=True)
    summary = write_reports(study, params, layout)
    summary["wall_s"] = round(time.perf_counter() - start, 2)
    write_json(layout.search_metrics, summary)
    print(f"[search] done in {summary['wall_s']:.1f}s: {summary}", flush=True)
    print(f"[search] reports: {layout.search_reports}/ (summary.md, best_params.yaml)", flush=True)
    if stopped_by is not None:
        print(
            f"[search] interrupted with {summary['trials']} of {section.n_trials} trials "
            "(the ones running are failed); the reports above cover the finished ones; run "
            "the search again to resume the study (it runs the failed ones again first)",
            flush=True,
        )
        raise stopped_by  # SIGTERM's `Terminated` exits 143, a Ctrl-C 130
    if any(codes):
        check_nothing_lost(study, section.n_trials, codes)
    return summary


def _prepare_study(section: SearchParams, layout: Layout, join: bool, workers: int) -> None:
    """Open the study and ready it for this search, saying what it did: repair the journal,
    fail the trials a stopped worker left running, queue again those a Ctrl-C stopped and
    the enqueued ones, delete checkpoints no retry needs. A joining search (`join`) leaves
    all but the dead workers' trials (with heartbeats) to the search it joins."""
    journal = journal_path(section, layout)
    if not join and journal is not None:
        for repair in recover_journal(journal):
            print(f"[search] {repair}", flush=True)
    storage = make_storage(section, layout)
    study = study_in(storage, section)
    retries = section.retries
    if not join or has_heartbeat(storage):  # with heartbeats, only the dead workers' trials
        stale = fail_stale_trials(study, storage, retries)
        if stale:
            print(
                f"[search] trials {stale} were left running by a stopped worker: failed "
                f"and queued again (up to section.retries {retries} times)",
                flush=True,
            )
    if not join:
        stopped = requeue_stopped(study, retries)
        if stopped:
            print(
                f"[search] trials {stopped} were stopped (Ctrl-C or SIGTERM): queued again (up to "
                f"section.retries {retries} times)",
                flush=True,
            )
        waiting = enqueue(study, section)
        if waiting:
            print(f"[search] {waiting} queued trial(s) run first (search.enqueue, retries)")
        dropped = drop_stale_checkpoints(study, trial_checkpoints(layout, section))
        if dropped:
            print(f"[search] deleted the checkpoints of ended trials {dropped} (no retry left)")
    waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    print(
        f"[search] study {section.study_name!r}: {len(started_trials(study))} of "
        f"{section.n_trials} trials so far"
        + (f", {waiting} queued" if waiting else "")
        + f", {workers} worker(s)",
        flush=True,
    )
