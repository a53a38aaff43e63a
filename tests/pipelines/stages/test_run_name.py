"""A run's TensorBoard name says what it changes: the params that differ from the committed
experiment (or, outside git, from the defaults it starts from), cut with a hash when long."""

import re
import subprocess

import yaml

from pipelines.params import parse_params
from pipelines.stages.run_name import MAX_NAME, run_name

COMMITTED = {
    "name": "tiny",
    "env": {"name": "cartpole", "num_envs": 8},
    "algorithm": {"name": "ppo", "ppo": {"lr": 0.001}},
}


def commit(root, data, env):
    (root / "params.yaml").write_text(yaml.safe_dump(data))
    for args in (["init", "-q"], ["add", "params.yaml"], ["commit", "-q", "-m", "params"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    head = ["git", "rev-parse", "HEAD"]
    return subprocess.run(head, cwd=root, env=env, check=True, capture_output=True, text=True)


def variant(**changes):
    data = yaml.safe_load(yaml.safe_dump(COMMITTED))
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        section = data
        for key in path:
            section = section.setdefault(key, {})
        section[last] = value
    return parse_params(data)


def test_the_name_carries_the_params_that_differ_from_the_committed_experiment(
    tmp_path, monkeypatch, git_dvc_env
):
    commit(tmp_path, COMMITTED, git_dvc_env)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    monkeypatch.delenv("DVC_EXP_BASELINE_REV", raising=False)
    assert run_name(parse_params(COMMITTED), tmp_path) == "tiny"
    changed = variant(algorithm__ppo__lr=0.003, env__num_envs=16, policy__hidden_sizes=[32, 32])
    assert run_name(changed, tmp_path) == (
        "tiny__env.num_envs=16,policy.hidden_sizes=32+32,ppo.lr=0.003"
    )
    monkeypatch.setenv("DVC_EXP_NAME", "astir-lore")  # under `dvc exp run`
    assert run_name(variant(env__num_envs=16), tmp_path) == "astir-lore__env.num_envs=16"


def test_under_dvc_exp_run_the_baseline_is_the_commit_dvc_names(tmp_path, monkeypatch, git_dvc_env):
    first = commit(tmp_path, COMMITTED, git_dvc_env).stdout.strip()
    commit(tmp_path, {**COMMITTED, "env": {"name": "cartpole", "num_envs": 16}}, git_dvc_env)
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", first)
    assert run_name(variant(env__num_envs=16), tmp_path) == "tiny__env.num_envs=16"
    monkeypatch.delenv("DVC_EXP_BASELINE_REV")
    assert run_name(variant(env__num_envs=16), tmp_path) == "tiny"  # HEAD sets 16 too


def test_outside_git_the_name_carries_what_params_yaml_sets_beyond_its_preset(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    # cartpole's preset: 32 envs, lr 0.001 (so the lr given is no difference).
    assert run_name(parse_params(COMMITTED), tmp_path) == "tiny__env.num_envs=8"
    assert run_name(parse_params({"name": "plain", "env": {"name": "cartpole"}}), tmp_path) == (
        "plain"
    )


def test_a_committed_file_this_code_no_longer_reads_falls_back_to_the_defaults(
    tmp_path, monkeypatch, git_dvc_env
):
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    commit(tmp_path, {**COMMITTED, "renamed_section": {}}, git_dvc_env)
    assert run_name(parse_params(COMMITTED), tmp_path) == "tiny__env.num_envs=8"


def test_a_long_name_is_cut_after_a_whole_param_and_ends_in_a_hash(tmp_path, monkeypatch):
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    many = {f"trainer__{key}": 7 for key in ("eval_episodes", "eval_every_iters", "num_steps")}
    first = run_name(variant(trainer__total_env_steps=1000, **many), tmp_path)
    second = run_name(variant(trainer__total_env_steps=2000, **many), tmp_path)
    # tiny__env.num_envs=8,trainer.eval_episodes=7,trainer.eval_every_iters=7,
    # trainer.num_steps=7,trainer.total_env_steps=1000: 120 characters. 96 - "~" - 8 = 87
    # fit; the last whole param among them ends at 72.
    assert (
        first[:-8]
        == second[:-8]
        == ("tiny__env.num_envs=8,trainer.eval_episodes=7,trainer.eval_every_iters=7,~")
    )
    assert re.fullmatch(r"[0-9a-f]{8}", first[-8:]) and len(first) <= MAX_NAME
    assert first != second  # the hash tells apart runs the cut does not
