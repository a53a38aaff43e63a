"""The `evaluate` stage: the checkpoint `evaluation.checkpoint` names, on the evaluation seed,
with the episodes' statistics written as they were measured."""

import json
import statistics

import pytest

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.evaluate import evaluate
from pipelines.stages.train import train
from rlcore.envs import make_env
from rlcore.evaluate import run_episodes
from rlcore.trained import load_trained_policy
from tests.pipelines.stages.tiny_experiment import TINY


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = Layout(tmp_path_factory.mktemp("evaluate")).for_seed(3)
    train(parse_params({**TINY, "seeds": [3]}), root)
    return root


@pytest.mark.parametrize("which", ["final", "best"])
def test_it_reports_the_named_checkpoints_episodes_on_the_evaluation_seed(trained, which):
    params = parse_params(
        {**TINY, "seeds": [3], "evaluation": {**TINY["evaluation"], "checkpoint": which}}
    )
    metrics = evaluate(params, trained)

    # The same episodes, run by hand from that checkpoint on `evaluation.seed`.
    cfg = params.experiment(seed=3)
    env = make_env(cfg.env, num_envs=5)
    policy = load_trained_policy(cfg, trained.checkpoint(which), env=env)
    episodes = run_episodes(policy, env, seed=123)
    returns = episodes.returns.tolist()
    assert metrics["episodes"] == 5 == len(returns)
    assert metrics["return_mean"] == pytest.approx(statistics.fmean(returns))
    assert metrics["return_std"] == pytest.approx(statistics.pstdev(returns))
    assert (metrics["return_min"], metrics["return_max"]) == (min(returns), max(returns))
    assert metrics["length_mean"] == pytest.approx(episodes.lengths.double().mean().item())
    assert json.loads(trained.eval_metrics.read_text()) == metrics


def test_the_best_checkpoint_is_read_even_when_the_final_one_is_gone(trained, tmp_path):
    layout = Layout(tmp_path).for_seed(3)
    layout.best_checkpoint.parent.mkdir(parents=True)
    layout.best_checkpoint.write_bytes(trained.best_checkpoint.read_bytes())
    best = {**TINY, "seeds": [3], "evaluation": {**TINY["evaluation"], "checkpoint": "best"}}
    assert evaluate(parse_params(best), layout)["episodes"] == 5
    with pytest.raises(FileNotFoundError, match=r"final\.pt is missing: run the `train` stage"):
        evaluate(parse_params({**TINY, "seeds": [3]}), layout)
