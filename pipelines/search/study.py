"""The `search` stage: an Optuna study over `params.yaml`'s `search.space`.

Each trial applies `search.overrides` and its sampled values to the base params, validates
the result exactly like `params.yaml` (`apply_values`), and trains with the same function
as the `train` stage (`run_training`), `search.seeds_per_trial` times on consecutive seeds.
With `search.tasks`, it trains on each of those envs in turn (env.name replaced), and its
value is the mean of their normalised scores: defaults for a task family, chosen on some of
its tasks and checked on others.
Every evaluation is reported to the trial (its step is the evaluation's index within the
trial); the pruner may stop it (`TrialPruned`). A trial whose loss, observation or reward
goes non-finite ends FAILED and the study goes on.

The study lives in `search.storage`: by default Optuna's journal file
`outputs/search/journal.log` (a persistent DVC output); a path names a journal file of the
study's own (one that can be committed, so that any clone resumes the study); any
SQLAlchemy URL (e.g. PostgreSQL) is a database shared by workers on several machines.
`search.n_trials` is the study's total: a resumed study runs only the trials it lacks.
`--workers N` runs N processes on this machine against the same storage.

A running trial saves its training at an evaluation (at most every
`TRIAL_CHECKPOINT_EVERY_S`) to `trial_checkpoints`; a retry of a trial that a Ctrl-C or a
killed worker stopped goes on from there when that file is on its machine.

A worker that dies leaves its trial RUNNING. In a database, trials send heartbeats
(`pipelines.search.database`): any worker fails a trial whose heartbeat stopped and runs it again,
and workers whose study is full wait for the other workers' last trials so that none is
lost. The journal has no heartbeat, so trials left RUNNING are marked FAILED when a search
starts (not when it joins: `--join`); the journal's stale lock and torn last write, if the
kill left any, are repaired then too (`pipelines.search.journal`).

A database that stops answering (a restart, a failover) is waited for, up to
`search.db_outage_s`, by every process of the search (`pipelines.search.database`): trials go on
when it is back. After that long the search stops in one line (its workers quietly, the
search for them), and a new search resumes the study.

Outputs: `reports/search/` (best_params.yaml, trials.csv, summary.md, plots as PNG),
`outputs/search/html/` (the same plots as self-contained HTML), `metrics/search.json`; for a
params file other than the project's, the same beside them under the study's name
(`reports/search-<study_name>/`, ...: `Layout.for_search_params`).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import logging
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from pipelines.compare.aggregate import machine_line
from pipelines.files import atomic_path, write_json, write_text
from pipelines.layout import Layout
from pipelines.params import Params, apply_values, set_path
from pipelines.search.database import (
    DatabaseUnreachable,
    StorageError,
    database_gone,
    database_storage,
)
from pipelines.search.journal import journal_storage, recover_journal
from pipelines.search.space import (
    SearchDimension,
    SearchParams,
    SearchTask,
    is_journal_path,
    search_section,
)
from pipelines.stages.lifeline import SEARCH_PID_ENV
from pipelines.stages.progress import Progress
from pipelines.stages.train import run_training
from rlcore.checkpoint import CheckpointError, config_hashes, load_checkpoint
from rlcore.config import ExperimentConfig
from rlcore.envs import make_env
from rlcore.errors import NonFiniteError
from rlcore.runtime import configure_cpu, provenance
from rlcore.trained import build_policy
from rlcore.trainer import Trainer

OBJECTIVE_METRICS = {"return": "eval/episode_return", "success": "eval/success_rate"}
PLOTS = ("optimization_history", "param_importances", "intermediate_values")
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
ENQUEUED = "enqueued"  # user attribute of a trial from search.enqueue: the entry as JSON
WORKER = "worker"  # user attribute of every trial: host:pid of the process that ran it
# User attribute of every trial: the CPU, torch's kernels and the releases it trained on
# (`aggregate.machine_line`). A study whose trials ran on other kinds of CPU compares values
# that differ by more than their settings: another CPU computes other bits (docs/guide.md).
MACHINE = "machine"
INFEASIBLE = "infeasible"  # user attribute of a trial pruned before training: why
INTERRUPTED = "interrupted"  # user attribute of a trial a Ctrl-C failed: queued again later
# User attribute of a trial that went on from a stopped trial's checkpoint: the seconds the
# trials before it trained up to that checkpoint (its duration_s counts them).
EARLIER_S = "earlier_s"
TASK_SCORE = "score "  # user attributes of a multi-task trial: "score <env>" per task
TRIAL_PROGRESS = "search_trial"  # a trial checkpoint's entry: seed, evaluations, reports
# A running trial's checkpoint is rewritten at an evaluation at most this often: often enough
# that a stop costs minutes of training, seldom enough that a large replay buffer costs little.
TRIAL_CHECKPOINT_EVERY_S = 300.0
WAIT_POLL_S = 5.0  # how often a worker whose study is full looks at the others' trials


class SearchError(RuntimeError):
    """The study cannot run as configured (storage, sampler, objective)."""


@contextlib.contextmanager
def _database_outage_in_one_line() -> Iterator[None]:
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


# --- study construction ---------------------------------------------------------------


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


def retry_of(trial: FrozenTrial) -> int | None:
    """The dead worker's trial this one re-runs (the system attributes Optuna's
    `RetryHeartbeatStaleTrialCallback` writes: `failed_trial`, the first of `retry_history`)."""
    return trial.system_attrs.get("failed_trial")


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


def worker_seed(study_seed: int, worker: int, finished: int = 0) -> int:
    """The sampler seed of worker `worker` starting on a study with `finished` finished
    trials: the study's own for worker 0 of a new study (a one-process search samples as it
    always did), distinct and reproducible otherwise. Workers seeded alike would sample
    identical trials, and so would a resumed study: its first sampled trial would be the
    first session's again."""
    if worker == 0 and finished == 0:
        return study_seed
    key = [study_seed, worker] + ([finished] if finished else [])
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def make_sampler(
    search: SearchParams, worker: int = 0, finished: int = 0
) -> optuna.samplers.BaseSampler:
    seed = worker_seed(search.seed, worker, finished)
    if search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if search.sampler == "cmaes":
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise SearchError(
                "search.sampler 'cmaes' needs the cmaes package: pip install -e '.[cmaes]'"
            ) from None
        return optuna.samplers.CmaEsSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=search.startup_trials)


def make_pruner(search: SearchParams) -> optuna.pruners.BasePruner:
    if search.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=search.startup_trials, n_warmup_steps=search.warmup_evals
        )
    if search.pruner == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def study_in(
    storage: optuna.storages.BaseStorage, search: SearchParams, worker: int = 0
) -> optuna.Study:
    """The study in `storage` (`make_storage`), created on first use, with the sampler of
    worker `worker` and the search's pruner."""
    return optuna.create_study(
        study_name=search.study_name,
        storage=storage,
        sampler=make_sampler(search, worker),
        pruner=make_pruner(search),
        direction=search.direction,
        load_if_exists=True,
    )


def open_study(params: Params, layout: Layout, worker: int = 0, wait: bool = False) -> optuna.Study:
    """The study, created on first use; `wait` as for `make_storage`."""
    search = search_section(params)
    return study_in(make_storage(search, layout, wait), search, worker)


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
        _queue_again(study, storage.get_trial(ids[trial.number]), retries)
    return [t.number for t in running]


def requeue_stopped(study: optuna.Study, retries: int) -> list[int]:
    """Queue again (up to `retries` times) the trials a Ctrl-C failed, so that stopping a
    study and resuming it costs their training time but not their place in `n_trials`;
    return their numbers. A trial that failed on its own (a non-finite loss) stays failed."""
    stopped = _stopped(study.get_trials(deepcopy=False), retries)
    return [t.number for t in stopped if _queue_again(study, t, retries)]


def _stopped(trials: list[FrozenTrial], retries: int) -> list[FrozenTrial]:
    """The trials a Ctrl-C failed that a resumed search will run again: not yet replaced
    by a retry, and run fewer than `retries` times again so far."""
    replaced = _replaced(trials)
    return [
        t
        for t in trials
        if t.state == TrialState.FAIL
        and t.user_attrs.get(INTERRUPTED)
        and t.number not in replaced
        and len(t.system_attrs.get("retry_history", ())) < retries
    ]


def trial_checkpoints(layout: Layout, search: SearchParams) -> Path:
    """Where the study's running trials save their training: under the study's own name
    (`outputs/search-<study>/trials/`), as trial numbers are per study."""
    return layout.for_study(search.study_name).search_trials


def drop_stale_checkpoints(study: optuna.Study, checkpoints: Path) -> list[int]:
    """Delete the trial checkpoints nothing will go on from: a trial's, once it has ended
    and no retry of it waits or runs (e.g. its retries ran out, or a retry ran on another
    machine); return their trial numbers."""
    if not checkpoints.is_dir():
        return []
    trials = study.get_trials(deepcopy=False)
    live = (TrialState.WAITING, TrialState.RUNNING)
    wanted = {t.number for t in trials if t.state == TrialState.RUNNING} | {
        n for t in trials if t.state in live for n in t.system_attrs.get("retry_history", ())
    }
    dropped = []
    for path in checkpoints.glob("*.pt"):
        if path.stem.isdigit() and int(path.stem) < len(trials) and int(path.stem) not in wanted:
            path.unlink(missing_ok=True)
            dropped.append(int(path.stem))
    return sorted(dropped)


def _queue_again(study: optuna.Study, trial: FrozenTrial, retries: int) -> bool:
    """Queue a copy of `trial` with its values, marked as its retry (what the database's
    heartbeat callback writes), unless it already ran `retries` times; whether it did."""
    before = len(study.get_trials(deepcopy=False))
    with warnings.catch_warnings():  # "experimental" since Optuna 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(retries)(study, trial)
    return len(study.get_trials(deepcopy=False)) > before


# --- one trial ------------------------------------------------------------------------


def sample(trial: optuna.Trial, space: dict[str, SearchDimension]) -> dict[str, Any]:
    """Draw one value per searched path (categorical choices may be lists, e.g. sizes)."""
    values: dict[str, Any] = {}
    for path, dim in space.items():
        if dim.type == "float":
            assert dim.low is not None and dim.high is not None
            values[path] = trial.suggest_float(path, dim.low, dim.high, log=dim.log, step=dim.step)
        elif dim.type == "int":
            assert dim.low is not None and dim.high is not None
            step = int(dim.step) if dim.step else 1
            values[path] = trial.suggest_int(
                path, int(dim.low), int(dim.high), log=dim.log, step=step
            )
        else:
            # Optuna stores only scalars: choices go through JSON so lists work too.
            encoded = [json.dumps(c) for c in dim.choices or []]
            values[path] = json.loads(trial.suggest_categorical(path, encoded))
    return values


def trial_values(trial: FrozenTrial, space: dict[str, SearchDimension]) -> dict[str, Any]:
    """The values a finished trial ran with (categorical choices decoded)."""
    return {
        path: json.loads(trial.params[path]) if dim.type == "categorical" else trial.params[path]
        for path, dim in space.items()
        if path in trial.params
    }


# The training function of a trial's run: `run_training`'s signature (the train stage's loop):
# (trainer, iterations per chunk, called after each chunk) -> whether the target was reached.
Train = Callable[[Trainer, int | None, Callable[[Trainer], None] | None], bool]


def objective(
    params: Params,
    storage: optuna.storages.BaseStorage,
    train: Train = run_training,
    note: Callable[[str], None] | None = None,
    checkpoints: Path | None = None,
) -> Callable[[optuna.Trial], float]:
    """The study's objective: train the trial's config on each seed; mean final metric.

    `storage` is the study's (`study_in`): a running trial reads its state there, as another
    process may fail it meanwhile. `train` trains each seed (the train stage's
    `run_training`; a test passes its own). `note` gets a line per evaluation, so that an
    hour-long trial shows how it goes.

    With `checkpoints` (a directory), a running trial saves its training there at an
    evaluation (at most every `TRIAL_CHECKPOINT_EVERY_S`), and a retry of a trial that a
    Ctrl-C or a killed worker stopped goes on from that point, bit-identically, instead of
    training from the start; the checkpoint is deleted once the trial has ended."""

    def run(trial: optuna.Trial) -> float:
        live = _LiveTrial(trial, storage)
        if trial.user_attrs.get(INTERRUPTED):  # a retry copies its original's attributes
            trial.set_user_attr(INTERRUPTED, False)  # only a Ctrl-C of this run sets it
        ended = [*live.retried, trial.number]  # the checkpoints nothing goes on from once it ends
        try:
            value = _train_trial(live, params, train, note, checkpoints)
        except KeyboardInterrupt:
            # Not the params' fault: the next search queues them again (`requeue_stopped`).
            trial.set_user_attr(INTERRUPTED, True)
            raise  # its checkpoint stays, for the retry
        except (_TrialTakenOver, DatabaseUnreachable):
            raise  # another worker, or the next search, runs its retry: it may go on from there
        except BaseException:
            _drop_checkpoints(checkpoints, ended)  # pruned or failed: nothing to go on with
            raise
        _drop_checkpoints(checkpoints, ended)
        return value

    return run


class _TrialTakenOver(BaseException):
    """This worker's trial was finished by another process. A BaseException, so Optuna
    does not try to tell the finished trial FAIL again (which it cannot: it raises)."""


class _LiveTrial:
    """A trial this worker runs, and its record in the study's storage, where another
    process may fail it meanwhile (a search that starts, a worker that saw no heartbeat)."""

    def __init__(self, trial: optuna.Trial, storage: optuna.storages.BaseStorage) -> None:
        self.trial, self.storage = trial, storage
        self.id = trial_id(storage, trial.study, trial.number)
        # The trials this one retries, first to last (Optuna's `retry_history`).
        self.retried: list[int] = storage.get_trial(self.id).system_attrs.get("retry_history", [])

    def stored(self) -> FrozenTrial:
        """The trial as stored, if it is still this worker's to finish."""
        stored = self.storage.get_trial(self.id)
        if stored.state != TrialState.RUNNING:
            raise _TrialTakenOver(self.trial.number)
        return stored


def _train_trial(
    live: _LiveTrial,
    params: Params,
    train: Train,
    note: Callable[[str], None] | None,
    checkpoints: Path | None,
) -> float:
    """Sample the trial's values and train each of its runs (`_trial_runs`), going on from
    the checkpoint of a trial it retries if there is one; the mean of the runs' values."""
    trial, search = live.trial, search_section(params)
    trial.set_user_attr(WORKER, f"{socket.gethostname()}:{os.getpid()}")
    values = {**search.overrides, **sample(trial, search.space)}
    cfg = apply_values(params, values).experiment()
    trial.set_user_attr(MACHINE, machine_line(provenance(cfg.env.device)))
    infeasible = _infeasible(cfg, search)
    if infeasible:
        trial.set_user_attr(INFEASIBLE, infeasible)
        raise optuna.TrialPruned(infeasible)
    runs = _trial_runs(params, values, cfg)
    resume = _resume_point(live, checkpoints, [run.cfg for run in runs], note)
    restored: dict[str, Any] = resume[1] if resume is not None else {}
    earlier_s = float(restored.get("wall_s", 0.0))
    if earlier_s or trial.user_attrs.get(EARLIER_S):  # a retry copies its original's
        trial.set_user_attr(EARLIER_S, earlier_s)
    interval = search.eval_every_env_steps
    trainings = _Trainings(
        live,
        search,
        runs,
        note=note,
        checkpoints=checkpoints,
        # Each run's reports follow the previous run's (the pruner needs rising steps).
        steps_per_run=cfg.trainer.total_env_steps // interval + 1 if interval else 0,
        evaluations=restored.get("evaluations", 0),
        finals=list(restored.get("finals", [])),
        earlier_s=earlier_s,
    )
    for k in range(restored.get("seed_index", 0), len(runs)):
        # this run's evaluations of the metric (a task's: normalised), in order
        seen: list[float] = list(restored.get("seen", []))
        trainings.train_run(k, seen, train, params.runtime.compile, resume if restored else None)
        restored = {}  # the next seed starts from scratch
    live.stored()
    return statistics.fmean(trainings.finals)


@dataclass
class _Trainings:
    """A trial's runs, trained in turn: each evaluation reported to the trial (the pruner
    may stop it), the progress saved with the training to `checkpoints`."""

    live: _LiveTrial
    search: SearchParams
    runs: list[TrialRun]
    note: Callable[[str], None] | None
    checkpoints: Path | None
    steps_per_run: int  # the report steps of one run (`search.eval_every_env_steps`)
    evaluations: int  # reported so far
    finals: list[float]  # the value of each run trained so far
    earlier_s: float  # trained by the trials this one goes on from, up to their checkpoint
    started: float = field(default_factory=time.monotonic)
    saved_at: float = field(default_factory=time.monotonic)

    def train_run(
        self,
        k: int,
        seen: list[float],
        train: Train,
        compile_loss: bool,
        resume: tuple[Path, dict[str, Any]] | None,
    ) -> None:
        """Train run `k` (from `resume`, its retried trial's checkpoint, if any); keep its
        value, the mean of its last `search.objective_evals` evaluations (`seen`)."""
        run = self.runs[k]
        report = functools.partial(self._report, k, seen)
        trainer = Trainer(run.cfg, sink=report, compile_loss=compile_loss)
        if resume is not None:
            _go_on(self.live, trainer, resume, self.note)
        self.saved_at = time.monotonic()
        train(trainer, trainer.cfg.trainer.eval_every_iters or None, self._saver(k, seen))
        metric = OBJECTIVE_METRICS[self.search.objective]
        if metric not in trainer.last_eval:
            raise SearchError(
                f"search.objective {self.search.objective!r}: {run.cfg.env.name} reports no "
                f"{metric}"
            )
        self.finals.append(statistics.fmean(seen[-self.search.objective_evals :]))
        if run.task is not None:  # each task's score (mean over its seeds), for the reports
            scores = [
                f for f, done in zip(self.finals, self.runs, strict=False) if done.task is run.task
            ]
            self.live.trial.set_user_attr(f"{TASK_SCORE}{run.task.env}", statistics.fmean(scores))

    def _report(self, k: int, seen: list[float], env_steps: int, metrics: dict[str, float]) -> None:
        """The sink of run `k`: report its evaluation to the trial, which may be pruned."""
        metric = OBJECTIVE_METRICS[self.search.objective]
        if metric not in metrics:
            return
        run, trial, interval = self.runs[k], self.live.trial, self.search.eval_every_env_steps
        value = run.task.score(metrics[metric]) if run.task is not None else float(metrics[metric])
        seen.append(value)
        stored = self.live.stored()
        step = k * self.steps_per_run + env_steps // interval if interval else self.evaluations
        if step in stored.intermediate_values:
            return  # the final evaluation, in the last periodic one's interval
        trial.report(value, step)
        self.evaluations += 1
        if self.note is not None:
            self.note(
                f"[search] trial {trial.number}: {self.search.objective} "
                f"{metrics[metric]:.4g} at {env_steps:,} env steps{run.label}"
            )
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned after {env_steps:,} env steps")

    def _saver(self, k: int, seen: list[float]) -> Callable[[Trainer], None]:
        """What runs after each chunk of run `k`'s training: save the trial's progress, at
        most every `TRIAL_CHECKPOINT_EVERY_S`."""

        def save(trainer: Trainer) -> None:
            if (
                self.checkpoints is None
                or time.monotonic() - self.saved_at < TRIAL_CHECKPOINT_EVERY_S
            ):
                return
            progress = {
                "seed_index": k,
                "seen": seen,
                "finals": self.finals,
                "evaluations": self.evaluations,
                "reports": dict(self.live.stored().intermediate_values),
                "wall_s": self.earlier_s + time.monotonic() - self.started,
            }
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            number = self.live.trial.number
            trainer.save(self.checkpoints / f"{number}.pt", extra={TRIAL_PROGRESS: progress})
            self.saved_at = time.monotonic()
            _drop_checkpoints(self.checkpoints, self.live.retried)  # its own now goes further

        return save


def _seed_config(cfg: ExperimentConfig, k: int) -> ExperimentConfig:
    """The trial's config for its k-th seed (`search.seeds_per_trial`)."""
    return replace(cfg, trainer=replace(cfg.trainer, seed=cfg.trainer.seed + k))


@dataclass(frozen=True)
class TrialRun:
    """One training of a trial: a seed of env.name, or of one of `search.tasks`."""

    cfg: ExperimentConfig
    task: SearchTask | None
    label: str  # how progress lines name it ("" for a single run)


def _trial_runs(params: Params, values: dict[str, Any], cfg: ExperimentConfig) -> list[TrialRun]:
    """What a trial trains, in order: each task (or env.name alone) on each seed, with the
    evaluation interval of `search.eval_every_env_steps`. `cfg` is the trial's config for
    env.name; a task's is the same values applied with env.name replaced."""
    search = search_section(params)
    tasks: list[SearchTask | None] = list(search.tasks) or [None]
    runs = []
    for task in tasks:
        task_cfg = (
            cfg
            if task is None
            else apply_values(params, {**values, "env.name": task.env}).experiment()
        )
        if search.eval_every_env_steps is not None:  # the same env steps whatever the batch
            every = max(1, search.eval_every_env_steps // task_cfg.steps_per_iter)
            task_cfg = replace(task_cfg, trainer=replace(task_cfg.trainer, eval_every_iters=every))
        for k in range(search.seeds_per_trial):
            words = [] if task is None else [task.env]
            if search.seeds_per_trial > 1:
                words.append(f"seed {k + 1} of {search.seeds_per_trial}")
            label = f" ({', '.join(words)})" if words else ""
            runs.append(TrialRun(_seed_config(task_cfg, k), task, label))
    return runs


def _resume_point(
    live: _LiveTrial,
    checkpoints: Path | None,
    run_cfgs: list[ExperimentConfig],
    note: Callable[[str], None] | None,
) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint a retry goes on from (the latest its retried trials saved) and the
    trial's progress saved with it; None to train from the start (none, or one that is
    damaged or was written by another configuration: the params file changed since)."""
    if checkpoints is None:
        return None
    for number in reversed(live.retried):
        path = checkpoints / f"{number}.pt"
        if not path.exists():
            continue
        try:
            state = load_checkpoint(path)
            progress = state[TRIAL_PROGRESS]
            index = progress["seed_index"]
            if index >= len(run_cfgs) or state["config_hash"] not in config_hashes(run_cfgs[index]):
                raise CheckpointError("it was written by another configuration")
        except (CheckpointError, KeyError) as exc:
            if note is not None:
                note(f"[search] trial {live.trial.number} starts over: {path} is unusable: {exc}")
            return None
        return path, progress
    return None


def _go_on(
    live: _LiveTrial,
    trainer: Trainer,
    resume: tuple[Path, dict[str, Any]] | None,
    note: Callable[[str], None] | None,
) -> None:
    """Restore the retried trial's training and report its evaluations to this trial (the
    pruner and the plots see the whole curve)."""
    assert resume is not None
    path, progress = resume
    trainer.load(path)
    stored = live.stored()
    for step, value in sorted(progress["reports"].items()):
        if step not in stored.intermediate_values:
            live.trial.report(value, step)
    if note is not None:
        note(
            f"[search] trial {live.trial.number}: goes on from trial {path.stem}'s checkpoint at "
            f"{trainer.env_steps:,} env steps"
        )


def _drop_checkpoints(checkpoints: Path | None, numbers: list[int]) -> None:
    """Delete the checkpoints of the trials `numbers`."""
    if checkpoints is None:
        return
    for number in numbers:
        (checkpoints / f"{number}.pt").unlink(missing_ok=True)


def _infeasible(cfg: ExperimentConfig, search: SearchParams) -> str | None:
    """Why the trial's config is not worth training (a minibatch below
    `search.min_minibatch_size`), or None."""
    floor = search.min_minibatch_size
    count = getattr(cfg.algo, "num_minibatches", None)
    if floor is None or count is None:
        return None
    size = cfg.steps_per_iter // count
    if size >= floor:
        return None
    return (
        f"minibatches of {size} samples ({cfg.env.num_envs} envs x {cfg.trainer.num_steps} "
        f"steps / {count}) < search.min_minibatch_size {floor}: not trained"
    )


# --- running the study ----------------------------------------------------------------


def _progress(n_trials: int, progress: Progress) -> Callable[[optuna.Study, FrozenTrial], None]:
    def show(study: optuna.Study, trial: FrozenTrial) -> None:
        done = len(_finished(study))
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


def _stop_at_total(n_trials: int) -> Callable[[optuna.Study, FrozenTrial], None]:
    """Stop this worker once the study holds `n_trials` trials (finished or running)."""

    def stop(study: optuna.Study, trial: FrozenTrial) -> None:
        if len(_started(study)) >= n_trials:
            study.stop()

    return stop


def _started(study: optuna.Study) -> list[FrozenTrial]:
    """The trials that count toward n_trials: all but those still waiting (enqueued ones
    and retries run within n_trials) and the failed ones a retry replaces."""
    trials = study.get_trials(deepcopy=False)
    replaced = _replaced(trials)
    return [t for t in trials if t.state != TrialState.WAITING and t.number not in replaced]


def _replaced(trials: list[FrozenTrial]) -> set[int]:
    """The trials a retry copies (Optuna's `retry_history`): they count through the copy."""
    return {n for t in trials for n in t.system_attrs.get("retry_history", ())}


def _finished(study: optuna.Study) -> list[FrozenTrial]:
    """The finished trials that count toward n_trials (not the failed ones a retry
    replaces): the progress line's count."""
    return [t for t in _started(study) if t.state in _FINISHED]


def _why_retried(study: optuna.Study, original: int) -> str:
    stopped = study.get_trials(deepcopy=False)[original].user_attrs.get(INTERRUPTED)
    return "which a Ctrl-C stopped" if stopped else "whose worker died"


def enqueue(study: optuna.Study, search: SearchParams) -> int:
    """Queue `search.enqueue`'s trials, each once per study (a resumed search finds the
    ones it queued before by their `enqueued` attribute); return how many are waiting."""
    queued = {t.user_attrs.get(ENQUEUED) for t in study.get_trials(deepcopy=False)}
    for entry in search.enqueue:
        key = json.dumps(entry, sort_keys=True)
        if key in queued:
            continue
        encoded = {
            path: json.dumps(value) if search.space[path].type == "categorical" else value
            for path, value in entry.items()
        }
        study.enqueue_trial(encoded, user_attrs={ENQUEUED: key})
        queued.add(key)
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


@_database_outage_in_one_line()
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
    if search.n_trials - len(_started(study)) <= 0 and not _others_running(study, storage):
        return
    # A resumed study draws afresh: its seed counts every ended trial, replaced ones too.
    ended = len(study.get_trials(deepcopy=False, states=_FINISHED))
    study.sampler = make_sampler(search, worker, ended)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for handler in logging.getLogger("optuna").handlers:
        handler.addFilter(_without_interrupt_tracebacks)
    progress = Progress("search", search.n_trials, "trials", initial=len(_finished(study)))
    run = objective(params, storage, train, progress.note, trial_checkpoints(layout, search))
    callbacks = [_progress(search.n_trials, progress), _stop_at_total(search.n_trials)]
    deadline = None if search.timeout_s is None else time.monotonic() + search.timeout_s
    waiting_said = False
    try:
        while deadline is None or time.monotonic() < deadline:
            missing = search.n_trials - len(_started(study))
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
    except _TrialTakenOver as taken:
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


@_database_outage_in_one_line()
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
        raise SearchError("section.space is empty: add at least one parameter to search")
    if workers < 1:
        raise SearchError(f"--workers must be >= 1, got {workers}")
    start = time.perf_counter()
    _check_experiment_builds(params)
    _prepare_study(section, layout, join, workers)
    extra = _start_workers(params_path, layout, workers)
    interrupted = False
    try:
        # A joining search samples apart from the study's first process: its pid seeds it.
        run_worker(params, layout, worker=os.getpid() if join else 0, train=train)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        codes, stopped = _wait_for_workers(extra, stop=interrupted)
    interrupted |= stopped
    study = open_study(params, layout, wait=True)
    summary = write_reports(study, params, layout)
    summary["wall_s"] = round(time.perf_counter() - start, 2)
    write_json(layout.search_metrics, summary)
    print(f"[search] done in {summary['wall_s']:.1f}s: {summary}", flush=True)
    print(f"[search] reports: {layout.search_reports}/ (summary.md, best_params.yaml)", flush=True)
    if interrupted:
        print(
            f"[search] interrupted with {summary['trials']} of {section.n_trials} trials "
            "(the ones running are failed); the reports above cover the finished ones; run "
            "the search again to resume the study (it runs the failed ones again first)",
            flush=True,
        )
        raise KeyboardInterrupt
    if any(codes):
        _check_nothing_lost(study, section.n_trials, codes)
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
                f"[search] trials {stopped} were stopped by a Ctrl-C: queued again (up to "
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
        f"[search] study {section.study_name!r}: {len(_started(study))} of "
        f"{section.n_trials} trials so far"
        + (f", {waiting} queued" if waiting else "")
        + f", {workers} worker(s)",
        flush=True,
    )


def _start_workers(params_path: Path, layout: Layout, workers: int) -> list[subprocess.Popen]:
    """Start the search's worker processes 1 .. `workers` - 1 (`python -m pipelines search
    --worker k`): each dies with this process (`--parent-pid`) and runs in its own session,
    so that a terminal's Ctrl-C reaches this process alone, which stops them."""
    command = [sys.executable, "-m", "pipelines", "search", "--params", str(params_path)]
    return [
        subprocess.Popen(
            [*command, "--worker", str(index), "--parent-pid", str(os.getpid())],
            cwd=layout.root,
            env={**os.environ, SEARCH_PID_ENV: str(os.getpid())},
            start_new_session=True,
        )
        for index in range(1, workers)
    ]


def _wait_for_workers(workers: list[subprocess.Popen], stop: bool) -> tuple[list[int], bool]:
    """Wait for the worker processes; `stop`, or a Ctrl-C meanwhile: interrupt each once
    (its running trial is failed, its finished ones kept). Returns their exit codes and
    whether they were interrupted."""

    def interrupt() -> None:
        for process in workers:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)

    if stop:
        interrupt()
    while True:
        try:
            return [process.wait() for process in workers], stop
        except KeyboardInterrupt:
            if not stop:
                stop = True
                interrupt()


def _check_nothing_lost(study: optuna.Study, n_trials: int, codes: list[int]) -> None:
    """A worker died: fine if the study still has `n_trials` complete or pruned trials,
    an error naming the lost trials otherwise (the reports above show the rest)."""
    trials = study.get_trials(deepcopy=False)
    done = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    if done >= n_trials:
        print(f"[search] a worker exited with {codes}; the study completed anyway", flush=True)
        return
    lost = [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.FAIL)]
    raise SearchError(
        f"worker exit codes {codes}: the study has {done} of {n_trials} complete or pruned "
        f"trials; failed or unfinished: {lost}; run the search again to complete it"
    )


# --- reports --------------------------------------------------------------------------


def best_params_document(trial: FrozenTrial, params: Params) -> dict[str, Any]:
    """The best trial's values as a params.yaml fragment (nested mapping)."""
    fragment: dict[str, Any] = {}
    for path, value in trial_values(trial, search_section(params).space).items():
        set_path(fragment, path, value)
    return fragment


def write_reports(study: optuna.Study, params: Params, layout: Layout) -> dict[str, Any]:
    """best_params.yaml, trials.csv, plots and summary.md; returns the study's metrics."""
    search = search_section(params)
    trials = study.get_trials(deepcopy=False)
    replaced = _replaced(trials)  # failed trials a retry ran again: they count through it
    counted = [t for t in trials if t.number not in replaced]
    counts = {s.name.lower(): sum(t.state == s for t in counted) for s in TrialState}
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    summary: dict[str, Any] = {
        "trials": len(_started(study)),
        **counts,
        "retried": len(replaced),
    }
    out = layout.search_reports
    out.mkdir(parents=True, exist_ok=True)
    _write_trials_csv(trials, search, out / "trials.csv")
    best = study.best_trial if complete else None
    if best is not None:
        fragment = best_params_document(best, params)
        header = (
            f"# Best trial {best.number} of study {search.study_name!r}: "
            f"{search.objective} {best.value:.4g}.\n# Merge into params.yaml, or run it with "
            f"`dvc exp run dvc.yaml {' '.join(_set_flags(best, params))}`.\n"
        )
        write_text(out / "best_params.yaml", header + yaml.safe_dump(fragment, sort_keys=False))
        summary |= {"best_value": best.value, "best_trial": best.number}
    plots = _write_plots(study, out, layout.search_html)
    html = os.path.relpath(layout.search_html, out)
    own_file = bool(layout.search_name)
    summary_md = _summary_markdown(study, params, best, summary, plots, html, own_file)
    write_text(out / "summary.md", summary_md)
    return summary


def _set_flags(trial: FrozenTrial, params: Params) -> list[str]:
    return [
        f"-S '++{path}={json.dumps(value)}'"
        for path, value in trial_values(trial, search_section(params).space).items()
    ]


def trial_seconds(trial: FrozenTrial) -> float | None:
    """The wall time of a trial's training: its own, plus that of the stopped trials it went
    on from, up to their checkpoint (None for a trial that has not ended)."""
    if trial.duration is None:
        return None
    return trial.duration.total_seconds() + float(trial.user_attrs.get(EARLIER_S, 0.0))


def _write_trials_csv(trials: list[FrozenTrial], search: SearchParams, path: Path) -> None:
    scores = [f"{TASK_SCORE}{task.env}" for task in search.tasks]
    columns = [
        "number", "state", "value", *scores, *search.space, "evaluations", "duration_s",
        "worker", "retry_of", "machine",
    ]  # fmt: skip
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns)
    writer.writeheader()
    for t in trials:
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "value": t.value,
            "evaluations": len(t.intermediate_values),
            "duration_s": None if (wall := trial_seconds(t)) is None else round(wall, 3),
            "worker": t.user_attrs.get(WORKER),  # host:pid
            "retry_of": retry_of(t),
            "machine": t.user_attrs.get(MACHINE),
        }
        row |= {score: t.user_attrs.get(score) for score in scores}
        row |= {k: json.dumps(v) for k, v in trial_values(t, search.space).items()}
        writer.writerow(row)
    write_text(path, buffer.getvalue())


def _write_plots(study: optuna.Study, out: Path, html_dir: Path) -> list[str]:
    """Each plot Optuna can draw for this study, as PNG and self-contained HTML."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    html_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in PLOTS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
            try:
                figure = getattr(optuna.visualization, f"plot_{name}")(study)
                axes = getattr(optuna.visualization.matplotlib, f"plot_{name}")(study)
            except (ValueError, RuntimeError) as exc:  # e.g. importances need 2+ trials
                print(f"[search] no {name} plot: {exc}", flush=True)
                continue
        with atomic_path(html_dir / f"{name}.html") as tmp:
            figure.write_html(str(tmp), include_plotlyjs=True, full_html=True)
        fig = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        fig.set_size_inches(8, 4.5)
        fig.tight_layout()
        with atomic_path(out / f"{name}.png") as tmp:
            fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)
        written.append(name)
    return written


def _objective_words(search: SearchParams) -> str:
    words = (
        f"final evaluation {search.objective}"
        if search.objective_evals == 1
        else f"{search.objective}, mean of the last {search.objective_evals} evaluations"
    )
    if search.tasks:
        names = ", ".join(task.env for task in search.tasks)
        words = f"mean over {len(search.tasks)} tasks ({names}) of the normalised {words}"
    return words


def _summary_markdown(
    study: optuna.Study,
    params: Params,
    best: FrozenTrial | None,
    summary: dict[str, Any],
    plots: list[str],
    html: str,
    own_file: bool = False,
) -> str:
    """`own_file`: the study ran from a params file other than the project's params.yaml."""
    search = search_section(params)
    counts = {state.name.lower(): summary[state.name.lower()] for state in TrialState}
    stopped = [t.number for t in _stopped(study.get_trials(deepcopy=False), search.retries)]
    notes = []
    if stopped:
        notes.append(f"trials {stopped} were stopped by a Ctrl-C and run again on resuming")
    if summary["retried"]:
        notes.append(f"{summary['retried']} stopped trial(s) ran again as retries, not counted")
    machines = {
        t.user_attrs[MACHINE] for t in study.get_trials(deepcopy=False) if MACHINE in t.user_attrs
    }
    if len(machines) > 1:
        notes.append(
            f"trials ran on {len(machines)} kinds of machine (`trials.csv`, column `machine`), "
            "whose values differ by more than their settings"
        )
    lines = [
        f"# Search: {search.study_name}",
        "",
        f"{search.sampler.upper()} sampler (seed {search.seed}), {search.pruner} pruner; "
        f"objective: {search.direction} {_objective_words(search)} "
        f"(mean over {search.seeds_per_trial} seed(s)).",
        "",
        "Trials: "
        + ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        + f" ({summary['trials']} of `n_trials` {search.n_trials})"
        + "".join(f"; {note}" for note in notes)
        + ".",
        "",
    ]
    if best is not None:
        lines += [
            f"**Best: trial {best.number}, {'score' if search.tasks else search.objective} "
            f"{best.value:.4g}** "
            "(`best_params.yaml`).",
            "",
        ]
        if search.tasks:
            per_task = ", ".join(
                f"{task.env} {best.user_attrs.get(TASK_SCORE + task.env, float('nan')):.3g}"
                for task in search.tasks
            )
            lines += [f"Its score per task (0: `low`, 1: `high`): {per_task}.", ""]
    if best is not None and own_file:
        lines += [
            "This study ran from its own params file, not the project's `params.yaml`. To "
            "confirm the best trial as a DVC experiment, make that file's experiment the "
            "project's (copy it to `params.yaml` without its `search` section, with the "
            "budget and `seeds` to confirm on), merge `best_params.yaml` into it, and run "
            "`dvc exp run`.",
            "",
        ]
    elif best is not None:
        lines += [
            f"To confirm it on every seed of `seeds` {params.seeds} as a DVC experiment, and "
            "compare it with the baseline:",
            "",
            "```bash",
            f"dvc exp run dvc.yaml -n best-trial-{best.number} "
            + " ".join(_set_flags(best, params)),
            "python -m pipelines compare",
            "```",
            "",
        ]
    ranked = sorted(
        (
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and math.isfinite(t.value)
        ),
        key=lambda t: t.value or 0.0,
        reverse=search.direction == "maximize",
    )
    if ranked:
        lines += [
            "Completed trials, best first:",
            "",
            "| trial | value | " + " | ".join(search.space) + " |",
            "|---" * (2 + len(search.space)) + "|",
        ]
        for t in ranked[:10]:
            values = trial_values(t, search.space)
            cells = " | ".join(json.dumps(values.get(k)) for k in search.space)
            lines.append(f"| {t.number} | {t.value:.4g} | {cells} |")
        lines.append("")
    for name in plots:
        lines += [f"![{name}]({name}.png) ([interactive]({html}/{name}.html))", ""]
    return "\n".join(lines)
