"""The study's objective: a trial's sampled values, applied to the base params after
`search.overrides` and validated exactly like `params.yaml` (`apply_values`), trained
`search.seeds_per_trial` times on consecutive seeds by the training function it is given
(the `train` stage's `run_training` by default).

With `search.tasks`, a trial trains on each of those envs in turn (env.name replaced), and
its value is the mean of their normalised scores: defaults for a task family, chosen on
some of its tasks and checked on others. Every evaluation is reported to the trial (its
step is the evaluation's index within the trial); the pruner may stop it (`TrialPruned`).
A trial whose loss, observation or reward goes non-finite ends FAILED (the worker catches
`NonFiniteError`) and the study goes on.
"""

from __future__ import annotations

import functools
import os
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from pipelines.compare.aggregate import machine_line
from pipelines.params import Params, apply_values
from pipelines.search.errors import SearchError
from pipelines.search.outage import DatabaseUnreachable
from pipelines.search.sampling import sample
from pipelines.search.space import SearchParams, SearchTask, search_section
from pipelines.search.storage import trial_id
from pipelines.search.trial_checkpoints import (
    Resume,
    drop_checkpoints,
    go_on,
    resume_point,
    save_checkpoint,
    save_due,
)
from pipelines.search.trials import (
    EARLIER_S,
    INFEASIBLE,
    INTERRUPTED,
    MACHINE,
    TASK_SCORE,
    WORKER,
)
from pipelines.stages.train import run_training
from rlcore.config import ExperimentConfig
from rlcore.runtime import provenance
from rlcore.trainer import Trainer

OBJECTIVE_METRICS = {"return": "eval/episode_return", "success": "eval/success_rate"}
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

    With `checkpoints` (a directory, `trial_checkpoints`), a running trial saves its
    training there at an evaluation (at most every `TRIAL_CHECKPOINT_EVERY_S`), and a retry
    of a trial that a Ctrl-C or a killed worker stopped goes on from that point,
    bit-identically, instead of training from the start; the checkpoint is deleted once the
    trial has ended."""

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
        except (TrialTakenOver, DatabaseUnreachable):
            raise  # another worker, or the next search, runs its retry: it may go on from there
        except BaseException:
            drop_checkpoints(checkpoints, ended)  # pruned or failed: nothing to go on with
            raise
        drop_checkpoints(checkpoints, ended)
        return value

    return run


class TrialTakenOver(BaseException):
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
            raise TrialTakenOver(self.trial.number)
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
    cfgs = [run.cfg for run in runs]
    resume = resume_point(trial.number, live.retried, checkpoints, cfgs, note)
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
        compiled, _ = params.runtime.compiles(runs[k].cfg)
        trainings.train_run(k, seen, train, compiled, resume if restored else None)
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
        resume: Resume | None,
    ) -> None:
        """Train run `k` (from `resume`, its retried trial's checkpoint, if any); keep its
        value, the mean of its last `search.objective_evals` evaluations (`seen`)."""
        run = self.runs[k]
        report = functools.partial(self._report, k, seen)
        trainer = Trainer(run.cfg, sink=report, compile_loss=compile_loss)
        if resume is not None:
            go_on(
                self.live.trial, self.live.stored().intermediate_values, trainer, resume, self.note
            )
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
        most every `TRIAL_CHECKPOINT_EVERY_S` (`save_due`)."""

        def save(trainer: Trainer) -> None:
            if self.checkpoints is None or not save_due(self.saved_at):
                return
            progress = {
                "seed_index": k,
                "seen": seen,
                "finals": self.finals,
                "evaluations": self.evaluations,
                "reports": dict(self.live.stored().intermediate_values),
                "wall_s": self.earlier_s + time.monotonic() - self.started,
            }
            save_checkpoint(trainer, self.checkpoints, self.live.trial.number, progress)
            self.saved_at = time.monotonic()
            drop_checkpoints(self.checkpoints, self.live.retried)  # its own now goes further

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
