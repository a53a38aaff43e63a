"""The held-out check of a study across tasks (benchmarks/family_check.py): it trains each
trial's settings exactly as the study did, on other tasks, and reuses finished runs."""

import dataclasses
import json

import yaml

from benchmarks.family_check import main
from benchmarks.suite.jobs import Job
from pipelines.files import write_json
from pipelines.layout import Layout
from pipelines.params import load_params
from pipelines.search.stage import search
from pipelines.search.study import open_study

STUDY = {
    "preset": "none",
    "env": {"name": "gymnasium:CartPole-v1", "num_envs": 4},
    "policy": {"hidden_sizes": [8]},
    "trainer": {"total_env_steps": 4 * 16 * 2, "num_steps": 16, "eval_episodes": 2},
    "search": {
        "study_name": "tiny-family",
        "tasks": [{"env": "gymnasium:CartPole-v1", "low": 20, "high": 500}],
        "space": {"algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "enqueue": [{"algorithm.ppo.lr": 0.003}],
        "pruner": "none",
        "n_trials": 1,
        "storage": "tiny-family.log",
    },
}


def test_a_trial_is_trained_on_held_out_tasks_and_finished_runs_are_reused(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "family.yaml").write_text(yaml.safe_dump(STUDY))
    params = load_params(tmp_path / "family.yaml")
    layout = Layout().for_search_params(tmp_path / "family.yaml", "tiny-family")
    search(params, layout, params_path=tmp_path / "family.yaml")
    (trial,) = open_study(params, layout).trials
    assert trial.params["algorithm.ppo.lr"] == 0.003
    argv = ["--params", "family.yaml", "--trials", "0", "--envs", "Acrobot-v1",
            "--steps", "128", "--eval-episodes", "1", "--results", "results"]  # fmt: skip
    main(argv)
    out = capsys.readouterr().out
    assert "... Acrobot-v1 trial 0 seed 0" in out and "| Acrobot-v1 |" in out
    result = json.loads((tmp_path / "results/family-tiny-family/Acrobot-v1_trial0_seed0_128.json")
                        .read_text())  # fmt: skip
    assert -500 <= result["return"] <= 0 and result["cpu_s"] > 0  # an Acrobot episode's return
    main(argv)  # again: the finished run is read, not trained
    assert "... Acrobot-v1" not in capsys.readouterr().out


def test_held_out_returns_are_scored_against_the_suites_sb3_runs_of_the_studys_algorithm(
    tmp_path, monkeypatch, capsys
):
    """`--suite` names the suite's results; the SB3 runs read are those of the study's
    algorithm at the suite's budget for the task (PPO on classic control: 100k)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "family.yaml").write_text(yaml.safe_dump(STUDY))
    params = load_params(tmp_path / "family.yaml")
    layout = Layout().for_search_params(tmp_path / "family.yaml", "tiny-family")
    search(params, layout, params_path=tmp_path / "family.yaml")
    suite = tmp_path / "records"
    write_json(suite / "random.json", {"Acrobot-v1": -500.0})
    for seed, ret in enumerate([-100.0, -80.0, -120.0]):  # SB3's mean: -100
        job = Job("ppo", "Acrobot-v1", "sb3", seed, 100_000)
        write_json(suite / job.filename, {
            "job": dataclasses.asdict(job), "return": ret, "cpu_s": 1.0, "wall_s": 1.0,
            "env_steps": 100_000, "eval_episodes": 50, "versions": {},
        })  # fmt: skip
    ours = tmp_path / "results/family-tiny-family/Acrobot-v1_trial0_seed0_100000.json"
    write_json(ours, {"return": -200.0, "cpu_s": 2.0})  # a finished run at the suite's budget
    main(["--params", "family.yaml", "--trials", "0", "--envs", "Acrobot-v1",
          "--results", "results", "--suite", "records"])  # fmt: skip
    out = capsys.readouterr().out
    assert "... Acrobot-v1" not in out  # read, not trained
    assert "| Acrobot-v1 | -200.0 (score 0.75) |" in out  # (-200 + 500) / (-100 + 500)
