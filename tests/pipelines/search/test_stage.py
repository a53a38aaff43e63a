"""The search stage end to end (`pipelines.search.stage`): a tiny study, and tiny
versions of the shipped MuJoCo studies."""

import itertools

import pytest
import yaml

from pipelines.compare.aggregate import machine_line
from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.stage import search
from pipelines.search.study import open_study
from pipelines.stages.train import run_training
from rlcore.runtime import provenance
from tests.pipelines.search.tiny_study import REPO, TINY, read_trials


def test_tiny_study_end_to_end(tmp_path, capsys):
    params, layout = parse_params(TINY), Layout(tmp_path)
    # Force trial 3 to report a hopeless first evaluation: the median pruner must stop it.
    calls = itertools.count()

    def forced(trainer, *args, **kwargs):
        if next(calls) == 3:
            trainer.sink(0, {"eval/episode_return": -1e9})
        return run_training(trainer, *args, **kwargs)

    summary = search(params, layout, train=forced)

    assert summary["trials"] == 5 and summary["pruned"] >= 1
    # Every evaluation is a line: a long trial shows how it goes before it ends.
    lines = capsys.readouterr().out.splitlines()
    assert "[search] trial 3: return -1e+09 at 0 env steps" in lines
    reported = open_study(params, layout).trials[0].intermediate_values
    assert sum(line.startswith("[search] trial 0: return ") for line in lines) == len(reported)
    assert summary["complete"] + summary["pruned"] == 5
    rows = read_trials(layout)
    assert [r["state"] for r in rows][3] == "PRUNED"
    assert {r["number"] for r in rows} == {"0", "1", "2", "3", "4"}
    here = machine_line(provenance("cpu"))  # where each trial trained, in its row
    assert {r["machine"] for r in rows} == {here} and "torch kernels" in here
    for name in ("summary.md", "optimization_history.png", "intermediate_values.png"):
        assert (layout.search_reports / name).stat().st_size > 0
    assert (layout.search_html / "optimization_history.html").read_text().count("plotly") > 10

    # best_params.yaml merges into params.yaml and passes the same validation.
    best = yaml.safe_load((layout.search_reports / "best_params.yaml").read_text())
    merged = {**TINY, "policy": {**TINY["policy"], **best["policy"]}}
    merged["algorithm"] = {"ppo": {**TINY["algorithm"]["ppo"], **best["algorithm"]["ppo"]}}
    experiment = parse_params(merged).experiment()
    assert experiment.algo.lr == pytest.approx(best["algorithm"]["ppo"]["lr"])
    assert summary["best_value"] == max(float(r["value"]) for r in rows if r["state"] == "COMPLETE")

    # Resuming a finished study runs no new trial.
    again = search(params, layout)
    assert again["trials"] == 5


@pytest.mark.parametrize("task", ["halfcheetah", "hopper"])
def test_the_mujoco_search_runs_its_enqueued_trials_first(tmp_path, task):
    """A tiny version of search/mujoco_<task>-ppo.yaml: RL Zoo's settings and the other
    enqueued ones (our presets'), then a sampled trial, all evaluated at the same env steps."""
    pytest.importorskip("mujoco")
    data = yaml.safe_load((REPO / "search" / f"mujoco_{task}-ppo.yaml").read_text())
    queued = len(data["search"]["enqueue"])
    data["trainer"] = {"total_env_steps": 4096, "eval_episodes": 1}
    data["search"] |= {"n_trials": queued + 1, "eval_every_env_steps": 2048}
    data["search"]["startup_trials"] = queued + 1
    params, layout = parse_params(data), Layout(tmp_path)
    assert search(params, layout)["complete"] == queued + 1
    *enqueued, sampled = open_study(params, layout).get_trials()
    zoo, family = enqueued[0], enqueued[-1]
    assert zoo.params["trainer.num_steps"] == "512" and zoo.params["env.num_envs"] == "1"
    assert zoo.params["algorithm.ppo.normalize_reward"] == "true"
    assert family.params["algorithm.ppo.lr"] == 3e-4 and family.params["env.num_envs"] == "8"
    assert all("enqueued" in t.user_attrs for t in enqueued)
    assert "enqueued" not in sampled.user_attrs
    for trial in enqueued:  # each evaluated after 2,048 and 4,096 env steps
        assert sorted(trial.intermediate_values) == [1, 2]


def test_the_sac_search_runs_rl_zoos_settings_first(tmp_path):
    """A tiny version of search/mujoco_halfcheetah-sac.yaml (UTD and warm-up shrunk)."""
    pytest.importorskip("mujoco")
    data = yaml.safe_load((REPO / "search" / "mujoco_halfcheetah-sac.yaml").read_text())
    data["trainer"] = {"total_env_steps": 1536, "eval_episodes": 1}
    data["search"] |= {"n_trials": 2, "eval_every_env_steps": 768, "startup_trials": 2}
    data["search"]["enqueue"][0]["replay"] |= {"warmup_steps": 1000, "batch_size": 128}
    space = data["search"]["space"]  # the sampled trial: the space's cheaper half
    space["replay"]["updates_per_step"]["choices"] = [0.5, 1.0]
    space["replay"]["batch_size"]["choices"] = [128, 256]
    space["policy"]["hidden_sizes"]["choices"] = [[256, 256]]
    params, layout = parse_params(data), Layout(tmp_path)
    assert search(params, layout)["complete"] == 2
    zoo, sampled = open_study(params, layout).get_trials()
    assert zoo.params["trainer.num_steps"] == "1" and zoo.params["algorithm.sac.lr"] == 3e-4
    assert sorted(zoo.intermediate_values) == [1, 2] and "enqueued" not in sampled.user_attrs


def test_the_sac_family_study_scores_the_earlier_defaults_on_its_three_tasks(tmp_path):
    """A tiny version of search/mujoco_family-sac.yaml: its first trial (the family's SAC
    defaults before the study) trains Walker2d, Hopper and HalfCheetah with those settings and
    records a normalised score for each."""
    pytest.importorskip("mujoco")
    data = yaml.safe_load((REPO / "search" / "mujoco_family-sac.yaml").read_text())
    data["trainer"] = {"total_env_steps": 400, "eval_episodes": 1}
    data["search"] |= {"n_trials": 1, "eval_every_env_steps": 200, "objective_evals": 1}
    data["search"]["enqueue"][0]["replay"] |= {"warmup_steps": 100, "batch_size": 128}
    params, layout = parse_params(data), Layout(tmp_path)
    assert search(params, layout)["complete"] == 1
    earlier, sb3s = open_study(params, layout).get_trials()  # SB3's settings: still queued
    assert sb3s.state.name == "WAITING"
    assert earlier.params["policy.hidden_sizes"] == "[400, 300]"
    assert earlier.params["replay.updates_per_step"] == "0.5"
    envs = [task["env"] for task in data["search"]["tasks"]]
    assert envs == ["gymnasium:Walker2d-v5", "gymnasium:Hopper-v5", "gymnasium:HalfCheetah-v5"]
    scores = [earlier.user_attrs[f"score {env}"] for env in envs]
    assert earlier.value == pytest.approx(sum(scores) / 3)
    assert len(earlier.intermediate_values) == 6  # two evaluations a task, reported in turn
