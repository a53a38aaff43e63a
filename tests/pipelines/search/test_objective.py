"""A trial trained by the training function the objective is given
(`pipelines.search.objective`): its value, reports, pruning and failures."""

import itertools
import warnings

import pytest
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.stage import search
from pipelines.search.study import open_study
from pipelines.stages.train import run_training
from rlcore.errors import NonFiniteError
from tests.pipelines.search.tiny_study import TINY, read_trials, with_search


def test_non_finite_trial_fails_and_the_study_goes_on(tmp_path):
    params, layout = parse_params(with_search(n_trials=3, pruner="none")), Layout(tmp_path)
    calls = itertools.count()

    def poisoned(trainer, *args, **kwargs):
        if next(calls) == 1:
            raise NonFiniteError("the env produced a non-finite obs")
        return run_training(trainer, *args, **kwargs)

    summary = search(params, layout, train=poisoned)
    assert summary["fail"] == 1 and summary["complete"] == 2


def test_objective_evals_averages_each_trials_last_evaluations(tmp_path):
    # 4 iterations, an evaluation after each: the value is the mean of the last 3 of 4.
    data = with_search(n_trials=2, pruner="none", objective_evals=3)
    params, layout = parse_params(data), Layout(tmp_path)
    search(params, layout)
    for trial in open_study(params, layout).get_trials():
        evals = [trial.intermediate_values[k] for k in sorted(trial.intermediate_values)]
        assert len(evals) == 4 and len(set(evals)) > 1
        assert trial.value == pytest.approx(sum(evals[-3:]) / 3)
    summary = (layout.search_reports / "summary.md").read_text()
    assert "objective: maximize return, mean of the last 3 evaluations" in summary


def test_a_trial_below_the_minibatch_floor_is_pruned_untrained(tmp_path, capsys):
    # 8 envs x 16 steps = 128 transitions: 2 minibatches of 64 pass a floor of 32, 8 of 16 not.
    space = {"algorithm.ppo.num_minibatches": {"type": "categorical", "choices": [2, 8]}}
    small, large = {"algorithm.ppo.num_minibatches": 8}, {"algorithm.ppo.num_minibatches": 2}
    data = with_search(space=space, n_trials=2, enqueue=[small, large], min_minibatch_size=32)
    params, layout = parse_params(data), Layout(tmp_path)
    trained = []

    def counted(trainer, *args, **kwargs):
        trained.append(trainer.cfg.algo.num_minibatches)
        return run_training(trainer, *args, **kwargs)

    summary = search(params, layout, train=counted)

    assert trained == [2]  # the infeasible trial never trained
    first, second = open_study(params, layout).get_trials()
    assert first.state == TrialState.PRUNED and not first.intermediate_values
    why = "minibatches of 16 samples (8 envs x 16 steps / 8) < search.min_minibatch_size 32"
    assert first.user_attrs["infeasible"].startswith(why)
    assert why in capsys.readouterr().out
    assert second.state == TrialState.COMPLETE and summary["best_value"] == second.value


def test_a_final_evaluation_inside_the_last_reported_interval_is_not_reported_twice(tmp_path):
    """640 env steps evaluated every 256: reports at steps 1 (256) and 2 (512); the final
    evaluation (640, also step 2) is the objective, not a second report Optuna would warn
    about and ignore."""
    data = with_search(n_trials=1, pruner="none", eval_every_env_steps=256)
    data["trainer"] = {**TINY["trainer"], "total_env_steps": 8 * 16 * 5}
    params, layout = parse_params(data), Layout(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert search(params, layout)["complete"] == 1
    assert not [w for w in caught if "already reported" in str(w.message)]
    (trial,) = open_study(params, layout).get_trials()
    assert sorted(trial.intermediate_values) == [1, 2]


def test_a_study_across_tasks_scores_each_trial_on_every_task(tmp_path):
    """With `search.tasks` every trial trains on each task (env.name replaced) and its value
    is the mean of the tasks' normalised final returns."""
    tasks = [
        {"env": "cartpole", "low": 20.0, "high": 500.0},
        {"env": "pendulum", "low": -1500.0, "high": -200.0},
    ]
    data = with_search(n_trials=2, pruner="none", tasks=tasks)
    params, layout = parse_params(data), Layout(tmp_path)
    finals: list[tuple[str, float]] = []  # (env, final return) of each training, in order

    def recorded(trainer, *args, **kwargs):
        reached = run_training(trainer, *args, **kwargs)
        finals.append((trainer.cfg.env.name, trainer.last_eval["eval/episode_return"]))
        return reached

    search(params, layout, train=recorded)

    assert [env for env, _ in finals] == ["cartpole", "pendulum"] * 2
    trials = open_study(params, layout).trials
    for trial, runs in zip(trials, (finals[:2], finals[2:]), strict=True):
        (_, cartpole), (_, pendulum) = runs
        scores = [(cartpole - 20.0) / 480.0, (pendulum + 1500.0) / 1300.0]
        assert trial.user_attrs["score cartpole"] == pytest.approx(scores[0])
        assert trial.user_attrs["score pendulum"] == pytest.approx(scores[1])
        assert trial.value == pytest.approx(sum(scores) / 2)
    rows = read_trials(layout)
    assert float(rows[1]["score pendulum"]) == pytest.approx(
        open_study(params, layout).trials[1].user_attrs["score pendulum"]
    )
    summary = (layout.search_reports / "summary.md").read_text()
    assert "mean over 2 tasks (cartpole, pendulum) of the normalised" in summary
    assert "Its score per task" in summary
    # The ranked table: each task's score and the worst of them, beside the value.
    head = "| trial | value | score cartpole | score pendulum | worst task |"
    assert head in summary
    for trial in trials:
        cart, pend = (trial.user_attrs[f"score {env}"] for env in ("cartpole", "pendulum"))
        scores = f"{cart:.3g} | {pend:.3g} | {min(cart, pend):.3g}"
        assert f"| {trial.number} | {trial.value:.4g} | {scores} |" in summary
