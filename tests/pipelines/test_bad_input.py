"""Broken params.yaml files, fed to `train`, `evaluate` and `search` as a user would:
each must exit non-zero with one line naming the key (or the file), and no traceback.

Runs the CLI in-process (`pipelines.__main__.main`): an exception that escaped it would
fail the test with its traceback, exactly where a user would have seen one.
"""

import copy

import pytest
import torch
import yaml

from pipelines.__main__ import main

BASE = {
    "name": "bad-input",
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 4},
    "policy": {"hidden_sizes": [8]},
    "algorithm": {"name": "ppo", "ppo": {"num_epochs": 1, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 64, "num_steps": 16, "eval_episodes": 2},
    "search": {"n_trials": 1, "space": {"algorithm.ppo.lr": {"type": "float", "low": 1e-4,
                                                              "high": 1e-3}}},
}  # fmt: skip


def edited(path: str, value: object) -> dict:
    """BASE with `path` (dotted) set to `value`."""
    data = copy.deepcopy(BASE)
    *parents, leaf = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return data


# (id, the file's text, what the error line must contain)
CASES = [
    ("empty", "", "is empty"),
    ("only-comments", "# nothing here\n\n", "is empty"),
    ("malformed-yaml", "env: [1, 2\n", "malformed YAML"),
    ("tab-indent", "env:\n\tname: cartpole\n", "malformed YAML"),
    ("top-level-list", "- 1\n- 2\n", "<top level>: must be a mapping"),
    ("top-level-scalar", "42\n", "<top level>: must be a mapping"),
    ("unknown-top-key", edited("trainr", {}), "trainr: unknown key"),
    ("unknown-env-key", edited("env.num_env", 4), "env.num_env: unknown key"),
    ("unknown-algo-key", edited("algorithm.ppo.clipeps", 0.1), "algorithm.ppo.clipeps: unknown"),
    ("unknown-trainer-key", edited("trainer.steps", 3), "trainer.steps: unknown key"),
    ("unknown-search-key", edited("search.trails", 3), "search.trails: unknown key"),
    ("unknown-runtime-key", edited("runtime.thread", 2), "runtime.thread: unknown key"),
    ("unknown-replay-key", edited("replay.size", 10), "replay.size: unknown key"),
    ("bool-as-int", edited("env.num_envs", True), "env.num_envs: must be a number, got true"),
    ("bool-as-float", edited("algorithm.ppo.clip_eps", False), "algorithm.ppo.clip_eps: must be"),
    ("bool-in-list", edited("seeds", [True]), "seeds.0: must be a number, got true"),
    ("zero-envs", edited("env.num_envs", 0), "env.num_envs: must be a positive integer"),
    ("string-envs", edited("env.num_envs", "many"), "env.num_envs: Input should be a valid int"),
    ("fractional-envs", edited("env.num_envs", 2.5), "env.num_envs: Input should be a valid int"),
    ("inf-lr", "algorithm:\n  ppo:\n    lr: .inf\n", "algorithm.ppo.lr: must be a finite number"),
    ("nan-lr", "algorithm:\n  ppo:\n    lr: .nan\n", "algorithm.ppo.lr"),
    ("negative-lr", edited("algorithm.ppo.lr", -1), "algorithm.ppo.lr: must be > 0"),
    ("gamma-range", edited("algorithm.ppo.gamma", 1.5), "algorithm.ppo.gamma: must be in (0, 1]"),
    ("huge-steps", "trainer:\n  total_env_steps: 1e999\n", "trainer.total_env_steps"),
    ("nan-target", "trainer:\n  stop_at_eval_return: .nan\n", "trainer.stop_at_eval_return"),
    ("zero-steps", edited("trainer.num_steps", 0), "trainer.num_steps: must be a positive"),
    # A union field: one line naming everything it takes, not one per pydantic branch.
    (
        "compile-word",
        edited("runtime.compile", "maybe"),
        "runtime.compile: must be true, false or auto, got 'maybe'",
    ),
    (
        "log-every-word",
        edited("runtime.log_every_iters", "often"),
        "runtime.log_every_iters: must be an integer or auto",
    ),
    ("no-seeds", edited("seeds", []), "seeds: List should have at least 1 item"),
    ("repeated-seeds", edited("seeds", [1, 1]), "seeds: must be distinct"),
    ("unknown-env", edited("env.name", "nope"), "env.name: must be one of"),
    ("unknown-gym-id", edited("env.name", "gymnasium:NoSuchEnv-v0"), "env.name: 'gymnasium:No"),
    ("missing-env-module", edited("env.name", "gymnasium:no_such_mod:X-v0"), "cannot import"),
    ("unknown-mujoco-task", edited("env.name", "mujoco:Humanoid"), "env.name: unknown MuJoCo"),
    ("bad-device", edited("env.device", "tpu"), "env.device: must be a torch device"),
    ("unknown-env-option", edited("env.options", {"bogus_opt": 1}), "env.options.bogus_opt"),
    (
        "bad-option-value",
        edited("env", {"name": "push_cube", "options": {"control": "teleport"}}),
        "env.options of push_cube",
    ),
    ("frame-stack-range", edited("env.frame_stack", 0), "env.frame_stack: must be an integer"),
    (  # checked against the env it stacks, before any step
        "frame-stack-without-images",
        edited("env.frame_stack", 4),
        "env.frame_stack: 4 stacks camera images, and env 'cartpole' has none (entries: state "
        "float32 [4]): remove env.frame_stack or set it to 1",
    ),
    ("unknown-algorithm", edited("algorithm.name", "a2c"), "algorithm.name: 'a2c': choose"),
    ("old-algorithm-layout", edited("algorithm", "ppo"), "algorithm: must be a mapping"),
    ("top-level-ppo", edited("ppo", {"lr": 0.1}), "ppo: algorithm settings live under"),
    ("too-many-minibatches", edited("algorithm.ppo.num_minibatches", 10**5), "num_minibatches"),
    (
        "group-size-vs-envs",
        edited("algorithm", {"name": "grpo", "grpo": {"group_size": 3}}),
        "algorithm.grpo.group_size: must divide env.num_envs",
    ),
    (  # a space for no one algorithm: BASE's PPO space would stop the search on that first
        "sac-on-discrete",
        edited("algorithm", {"name": "sac"})
        | {"search": {"space": {"trainer.num_steps": {"type": "int", "low": 8, "high": 16}}}},
        "algorithm.name 'sac' needs a",
    ),
    ("offline-fraction", edited("replay.offline", {"path": "d", "fraction": 2}), "fraction"),
    ("activation", edited("policy.activation", "swish"), "policy.activation: must be one of"),
    (
        "empty-search-range",
        edited("search.space", {"algorithm.ppo.lr": {"type": "float", "low": 1, "high": 0}}),
        "search.space.algorithm.ppo.lr: empty range",
    ),
    (
        "search-unknown-path",
        edited("search.space", {"ppo.lr": {"type": "float", "low": 0.1, "high": 1}}),
        "search.space.ppo.lr: unknown parameter path",
    ),
    ("bad-cron", edited("schedule.cron", "every night"), "schedule.cron"),
    ("dot-dot-name", edited("name", ".."), "name: '..' is not a name"),
]
if not torch.cuda.is_available():
    CASES.append(("cuda-missing", edited("env.device", "cuda"), "env.device 'cuda': CUDA is"))


def test_there_are_at_least_30_distinct_broken_files():
    assert len({case[0] for case in CASES}) == len(CASES) >= 30


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_broken_params_fail_every_stage_with_one_line_naming_the_key(
    tmp_path, monkeypatch, capsys, content, expected
):
    monkeypatch.chdir(tmp_path)
    text = content if isinstance(content, str) else yaml.safe_dump(content)
    (tmp_path / "params.yaml").write_text(text)
    # The stages never read `search`: a broken search section stops the search (and the
    # params check) alone, so it never blocks training.
    only_search = expected.startswith("search.")
    commands = [["search"], ["params"]] if only_search else [["train"], ["evaluate"], ["search"]]
    for command in commands:
        code = main(command)
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert code != 0, (command, out)
        assert lines and all(line.startswith("error: ") for line in lines), (command, err)
        assert any(expected in line for line in lines), (command, lines)
        assert "Traceback" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


def test_a_missing_params_file_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train"]) == 2
    assert capsys.readouterr().err.startswith("error: params.yaml: cannot be read")


@pytest.mark.parametrize("stage", ["train", "evaluate", "video", "report", "collect"])
def test_every_stage_has_its_own_help(stage, capsys):
    with pytest.raises(SystemExit) as done:
        main([stage, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m pipelines {stage} [-h] [--params PARAMS]")
    assert ("--seed SEED" in out) == (stage in ("train", "evaluate"))
    assert "Exit codes: 0 done" in out


def test_flow_help_keeps_its_usage_lines_apart(capsys):
    with pytest.raises(SystemExit):
        main(["flow", "--help"])
    out = capsys.readouterr().out
    assert "\n    python -m pipelines flow --search\n" in out


def test_a_union_fields_bad_value_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = edited("runtime", {"compile": "maybe", "log_every_iters": [2]})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(bad))
    assert main(["params"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: params.yaml: runtime.log_every_iters: must be an integer or auto, got [2]",
        "error: params.yaml: runtime.compile: must be true, false or auto, got 'maybe'",
    ]


def test_a_search_with_nothing_to_search_names_the_key(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(edited("search.space", {})))
    assert main(["search"]) == 1
    err = capsys.readouterr().err
    assert "search.space is empty: add at least one parameter" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written
