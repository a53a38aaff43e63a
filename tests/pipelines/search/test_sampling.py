"""A trial's values: sampled, or queued by `search.enqueue` (`pipelines.search.sampling`)."""

from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.stage import search
from pipelines.search.study import open_study
from tests.pipelines.search.tiny_study import with_search


def test_enqueued_trials_run_first_once_within_n_trials(tmp_path):
    published = {"algorithm": {"ppo": {"lr": 3e-4}}, "policy.hidden_sizes": [16, 16]}
    data = with_search(n_trials=3, enqueue=[published, {"algorithm.ppo.lr": 5e-3}])
    params, layout = parse_params(data), Layout(tmp_path)
    assert search(params, layout)["trials"] == 3
    trials = open_study(params, layout).get_trials()
    assert trials[0].params == {"algorithm.ppo.lr": 3e-4, "policy.hidden_sizes": "[16, 16]"}
    assert trials[1].params["algorithm.ppo.lr"] == 5e-3  # its hidden sizes sampled
    assert "enqueued" not in trials[2].user_attrs

    more = parse_params(with_search(n_trials=4, enqueue=data["search"]["enqueue"]))
    assert search(more, layout)["trials"] == 4  # resumed: nothing queued twice
    assert [t.state for t in open_study(more, layout).get_trials()].count(TrialState.WAITING) == 0
    assert sum("enqueued" in t.user_attrs for t in open_study(more, layout).get_trials()) == 2
