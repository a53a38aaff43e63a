"""One worker's trials (`pipelines.search.worker`)."""

import pytest
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.errors import SearchError
from pipelines.search.recovery import fail_stale_trials
from pipelines.search.space import search_section
from pipelines.search.storage import make_storage
from pipelines.search.study import open_study, study_in
from pipelines.search.worker import run_worker
from pipelines.stages.train import run_training
from tests.pipelines.search.tiny_study import with_search


def test_a_worker_whose_trial_is_failed_underneath_stops_with_one_line(tmp_path):
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)

    def restarted_meanwhile(trainer, *args, **kwargs):
        storage = make_storage(search_section(params), layout)  # a new search's
        study = study_in(storage, search_section(params))
        fail_stale_trials(study, storage, retries=2)
        return run_training(trainer, *args, **kwargs)

    with pytest.raises(SearchError, match="trial 0 was marked failed by another"):
        run_worker(params, layout, worker=1, train=restarted_meanwhile)
    trial, copy = open_study(params, layout).get_trials()
    assert trial.state == TrialState.FAIL and trial.intermediate_values == {}
    assert copy.state == TrialState.WAITING and copy.params == trial.params
