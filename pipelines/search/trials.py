"""What the search writes on a study's trials (user attributes), and how it counts them:
toward `n_trials`, as replaced by a retry, as finished, and for how long they trained."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
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


def retry_of(trial: FrozenTrial) -> int | None:
    """The dead worker's trial this one re-runs (the system attributes Optuna's
    `RetryHeartbeatStaleTrialCallback` writes: `failed_trial`, the first of `retry_history`)."""
    return trial.system_attrs.get("failed_trial")


def replaced_trials(trials: list[FrozenTrial]) -> set[int]:
    """The trials a retry copies (Optuna's `retry_history`): they count through the copy."""
    return {n for t in trials for n in t.system_attrs.get("retry_history", ())}


def started_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The trials that count toward n_trials: all but those still waiting (enqueued ones
    and retries run within n_trials) and the failed ones a retry replaces."""
    trials = study.get_trials(deepcopy=False)
    replaced = replaced_trials(trials)
    return [t for t in trials if t.state != TrialState.WAITING and t.number not in replaced]


def finished_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The finished trials that count toward n_trials (not the failed ones a retry
    replaces): the progress line's count."""
    return [t for t in started_trials(study) if t.state in FINISHED]


def trial_seconds(trial: FrozenTrial) -> float | None:
    """The wall time of a trial's training: its own, plus that of the stopped trials it went
    on from, up to their checkpoint (None for a trial that has not ended)."""
    if trial.duration is None:
        return None
    return trial.duration.total_seconds() + float(trial.user_attrs.get(EARLIER_S, 0.0))
