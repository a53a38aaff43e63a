"""The study: created in its storage on first use (`load_if_exists`), with the sampler of
`search.sampler` (seeded apart for each worker) and the pruner of `search.pruner`."""

from __future__ import annotations

import numpy as np
import optuna

from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.search.errors import SearchError
from pipelines.search.space import SearchParams, search_section
from pipelines.search.storage import make_storage


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
    """The sampler of `search.sampler`, seeded for `worker` (`worker_seed`)."""
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
    """The pruner of `search.pruner`."""
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
    worker `worker` and the search's pruner. An existing study is loaded, not created again:
    `create_study(load_if_exists=True)` appends a creation record to a journal each time,
    so merely opening a committed journal (for a report, a worker) would change the file."""
    sampler, pruner = make_sampler(search, worker), make_pruner(search)
    try:
        return optuna.load_study(
            study_name=search.study_name, storage=storage, sampler=sampler, pruner=pruner
        )
    except KeyError:  # not there yet; two workers racing to create it both get one study
        return optuna.create_study(
            study_name=search.study_name,
            storage=storage,
            sampler=sampler,
            pruner=pruner,
            direction=search.direction,
            load_if_exists=True,
        )


def open_study(params: Params, layout: Layout, worker: int = 0, wait: bool = False) -> optuna.Study:
    """The study, created on first use; `wait` as for `make_storage`."""
    search = search_section(params)
    return study_in(make_storage(search, layout, wait), search, worker)
