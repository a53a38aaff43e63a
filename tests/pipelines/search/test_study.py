"""The study, its sampler and pruner, and the workers' seeds (`pipelines.search.study`)."""

import itertools
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.stage import search
from pipelines.search.study import open_study, worker_seed
from pipelines.search.worker import run_worker
from pipelines.stages.train import run_training
from tests.pipelines.search.tiny_study import with_search


def test_study_objects_use_the_configured_sampler_and_pruner(tmp_path):
    study = open_study(parse_params(with_search(sampler="random", pruner="none")), Layout(tmp_path))
    assert isinstance(study.sampler, optuna.samplers.RandomSampler)
    assert isinstance(study.pruner, optuna.pruners.NopPruner)
    assert Path(Layout(tmp_path).search_journal).exists()


def test_opening_an_existing_study_leaves_its_journal_unchanged(tmp_path):
    """A committed journal opened for a report or by another worker stays byte-identical;
    the study opened again is the same one, with its own sampler and direction."""
    params, layout = parse_params(with_search(sampler="random", pruner="none")), Layout(tmp_path)
    first = open_study(params, layout)
    first.enqueue_trial({})
    journal = Path(layout.search_journal).read_bytes()
    again = open_study(params, layout, worker=1)
    assert Path(layout.search_journal).read_bytes() == journal
    assert again._study_id == first._study_id and len(again.get_trials()) == 1
    assert isinstance(again.sampler, optuna.samplers.RandomSampler)
    assert again.direction == first.direction


def test_worker_seeds_are_distinct_reproducible_and_the_studys_own_for_worker_0():
    seeds = [worker_seed(7, w) for w in range(4)]
    assert seeds[0] == 7 and len(set(seeds)) == 4
    assert seeds == [worker_seed(7, w) for w in range(4)]
    resumed = [worker_seed(7, w, finished=5) for w in range(4)]
    assert len(set(seeds + resumed)) == 8
    assert resumed == [worker_seed(7, w, finished=5) for w in range(4)]


def test_a_resumed_study_does_not_redraw_its_first_sessions_trials(tmp_path):
    """Seeded alike, a resumed worker would sample the first session's trials again: the
    HalfCheetah SAC study's first sampled trial after a resume repeated trial 1's values."""
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    calls = itertools.count()

    def ctrl_c_on_the_second(trainer, *args, **kwargs):
        if next(calls) == 1:
            raise KeyboardInterrupt
        return run_training(trainer, *args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c_on_the_second)
    params = parse_params(with_search(n_trials=4, pruner="none", retries=0))  # samples 2
    search(params, layout)
    first, stopped, *later = open_study(params, layout).get_trials()
    assert stopped.state == TrialState.FAIL and len(later) == 2
    assert all(t.params != first.params and t.params != stopped.params for t in later)
