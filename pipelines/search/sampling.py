"""A trial's values: drawn from `search.space` (`sample`), read back from a finished trial
(`trial_values`), or queued as `search.enqueue` gives them (`enqueue`). Optuna stores only
scalars: a categorical choice (which may be a list, e.g. layer sizes) goes through JSON."""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from pipelines.search.space import SearchDimension, SearchParams
from pipelines.search.trials import ENQUEUED


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
