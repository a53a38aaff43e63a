"""The `search:` section (`pipelines.search.space`): what it refuses, in one line."""

import pytest

from pipelines.params import ParamsError, parse_params
from pipelines.search.space import checked_search, search_section
from tests.pipelines.search.tiny_study import with_search


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"space": {"algorithm.ppo.lrate": {"type": "float", "low": 0.1, "high": 0.2}}},
            "search.space.algorithm.ppo.lrate: unknown parameter path",
        ),
        (
            {"space": {"algorithm.ppo.lr": {"type": "float", "low": 0.1, "high": 0.1}}},
            "search.space.algorithm.ppo.lr: empty range: low (0.1) must be < high (0.1)",
        ),
        (
            {"space": {"algorithm.ppo.lr": {"type": "float", "low": 0, "high": 1, "log": True}}},
            "search.space.algorithm.ppo.lr: a log-scale range must be > 0, got low=0",
        ),
        ({"sampler": "grid"}, "search.sampler: Input should be 'tpe', 'random' or 'cmaes'"),
        ({"pruner": "hyperband"}, "search.pruner: Input should be 'median'"),
        ({"min_minibatch_size": 0}, "search.min_minibatch_size: Input should be greater"),
        ({"objective_evals": 0}, "search.objective_evals: Input should be greater"),
        (
            {"space": {"algorithm.ppo.gamma": {"type": "float", "low": 0.9, "high": 2.0}}},
            "search.space.algorithm.ppo.gamma: the value 2.0 is invalid",
        ),
        (
            {"enqueue": [{"algorithm.ppo.lr": 1e-3}, {"algorithm": {"ppo": {"gamma": 0.9}}}]},
            "search.enqueue[1].algorithm.ppo.gamma: not a path of search.space",
        ),
        (
            {"enqueue": [{"algorithm.ppo.lr": 0.5}]},
            "search.enqueue[0].algorithm.ppo.lr: 0.5 is outside the searched float range "
            "[0.0001, 0.01]",
        ),
        (
            {"enqueue": [{"policy.hidden_sizes": [64]}]},
            "search.enqueue[0].policy.hidden_sizes: [64] is outside the searched choices "
            "[[8], [16, 16]]",
        ),
    ],
)
def test_bad_search_space_fails_before_any_trial(changes, line):
    with pytest.raises(ParamsError) as info:
        checked_search(parse_params(with_search(**changes)))
    assert info.value.lines[0].startswith(line), info.value.lines


@pytest.mark.parametrize("path", ["", "search/studies/"])
def test_a_journal_path_that_names_no_file_is_one_line(path):
    with pytest.raises(ParamsError, match="is not a journal file's path"):
        search_section(parse_params(with_search(storage=path)))


@pytest.mark.parametrize(
    "tasks, words",
    [
        ([{"env": "cartpole", "low": 1.0, "high": 1.0}], "no scale"),
        (
            [{"env": "cartpole", "low": 0, "high": 1}, {"env": "cartpole", "low": 0, "high": 2}],
            "more than once",
        ),
    ],
)
def test_search_tasks_bad_input_is_refused_in_one_line(tasks, words):
    with pytest.raises(ParamsError, match=words):
        search_section(parse_params(with_search(tasks=tasks)))
