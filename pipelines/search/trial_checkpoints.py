"""A running trial's checkpoints: its training saved at an evaluation (at most every
`TRIAL_CHECKPOINT_EVERY_S`) to `trial_checkpoints`, with the trial's progress; a retry of a
trial that a Ctrl-C or a killed worker stopped goes on from there, bit-identically, when
that file is on its machine. A checkpoint is deleted once nothing will go on from it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.search.space import SearchParams
from rlcore.checkpoint import CheckpointError, config_hashes, load_checkpoint
from rlcore.config import ExperimentConfig
from rlcore.trainer import Trainer

TRIAL_PROGRESS = "search_trial"  # a trial checkpoint's entry: seed, evaluations, reports
# A running trial's checkpoint is rewritten at an evaluation at most this often: often enough
# that a stop costs minutes of training, seldom enough that a large replay buffer costs little.
TRIAL_CHECKPOINT_EVERY_S = 300.0
# What a retry goes on from: a checkpoint and the trial's progress saved with it.
Resume = tuple[Path, dict[str, Any]]


def trial_checkpoints(layout: Layout, search: SearchParams) -> Path:
    """Where the study's running trials save their training: under the study's own name
    (`outputs/search-<study>/trials/`), as trial numbers are per study."""
    return layout.for_study(search.study_name).search_trials


def save_due(saved_at: float) -> bool:
    """Whether a trial that last saved at `saved_at` (`time.monotonic`) saves again now."""
    return time.monotonic() - saved_at >= TRIAL_CHECKPOINT_EVERY_S


def save_checkpoint(
    trainer: Trainer, checkpoints: Path, number: int, progress: dict[str, Any]
) -> None:
    """Save the training of trial `number` with the trial's progress (`TRIAL_PROGRESS`)."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    trainer.save(checkpoints / f"{number}.pt", extra={TRIAL_PROGRESS: progress})


def resume_point(
    number: int,
    retried: list[int],
    checkpoints: Path | None,
    run_cfgs: list[ExperimentConfig],
    note: Callable[[str], None] | None,
) -> Resume | None:
    """The checkpoint trial `number` goes on from (the latest that the trials it retries,
    `retried`, saved) and the progress saved with it; None to train from the start (none, or
    one that is damaged or was written by another configuration: the params file changed
    since)."""
    if checkpoints is None:
        return None
    for retried_number in reversed(retried):
        path = checkpoints / f"{retried_number}.pt"
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
                note(f"[search] trial {number} starts over: {path} is unusable: {exc}")
            return None
        return path, progress
    return None


def go_on(
    trial: optuna.Trial,
    reported: dict[int, float],
    trainer: Trainer,
    resume: Resume,
    note: Callable[[str], None] | None,
) -> None:
    """Restore the retried trial's training and report its evaluations to this trial (the
    pruner and the plots see the whole curve); `reported`: the trial's reports so far."""
    path, progress = resume
    trainer.load(path)
    for step, value in sorted(progress["reports"].items()):
        if step not in reported:
            trial.report(value, step)
    if note is not None:
        note(
            f"[search] trial {trial.number}: goes on from trial {path.stem}'s checkpoint at "
            f"{trainer.env_steps:,} env steps"
        )


def drop_checkpoints(checkpoints: Path | None, numbers: list[int]) -> None:
    """Delete the checkpoints of the trials `numbers`."""
    if checkpoints is None:
        return
    for number in numbers:
        (checkpoints / f"{number}.pt").unlink(missing_ok=True)


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
