import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from pipelines.__main__ import main
from pipelines.import_config import (
    ConfigImportError,
    every_iters,
    import_config,
    import_config_main,
    render,
)
from pipelines.import_config.write import _check_reads_back
from pipelines.params import load_params

DATA = Path(__file__).parent / "data"
# The tutorial's train_config.json. Its trainer.gym_config path is relative to EmbodiChain's
# checkout, which DATA stands in for: DATA/configs/agents/rl/push_cube/gym_config.json.
PPO = DATA / "embodichain_push_cube_ppo.json"
# The tutorial's GRPO example in the same file, with its `env` section instead of gym_config.
GRPO = DATA / "embodichain_push_cube_grpo.json"


def _leaf_paths(node: dict, prefix: str = "") -> list[str]:
    paths = []
    for key, value in node.items():
        if isinstance(value, dict) and value:
            paths += _leaf_paths(value, f"{prefix}{key}.")
        else:
            paths.append(f"{prefix}{key}")
    return paths


def _import(tmp_path: Path, source: Path, *extra: str) -> Path:
    out = tmp_path / "params.yaml"
    assert import_config_main([str(source), "-o", str(out), *extra]) == 0
    return out


def _write(tmp_path: Path, config: dict) -> Path:
    source = tmp_path / "train_config.json"
    source.write_text(json.dumps(config))
    return source


def test_the_tutorial_ppo_config_imports_with_its_hyperparameters(tmp_path, capsys):
    out = _import(tmp_path, PPO)
    params = load_params(out)
    ppo = params.algorithm.config
    assert params.name == "push_cube_ppo" and params.seeds == [42]
    assert (params.env.name, params.env.device) == ("push_cube", "cuda:0")  # from PushCubeRL
    assert params.env.num_envs == 64  # trainer.num_envs overrides the gym_config's 128
    assert params.algorithm.name == "ppo"
    assert (ppo.lr, ppo.num_epochs, ppo.gamma, ppo.gae_lambda) == (1e-4, 10, 0.99, 0.95)
    assert (ppo.clip_eps, ppo.ent_coef, ppo.max_grad_norm) == (0.2, 0.01, 0.5)
    # EmbodiChain's value loss is the plain MSE, ours 0.5 x MSE: the same gradient needs 2x.
    assert ppo.vf_coef == 2 * 0.5
    assert ppo.adam_eps == 1e-8  # EmbodiChain's torch.optim.Adam default
    # 64 envs x 1024 steps = 65,536 samples per update, in batches of 8,192: 8 minibatches.
    assert ppo.num_minibatches == 8
    assert params.trainer.num_steps == 1024  # buffer_size: steps per env per rollout
    assert params.trainer.total_env_steps == 65_536_000  # 1000 iterations x 1024 x 64
    # EmbodiChain evaluates and saves when global_step % 100 == 0, global_step being
    # k x 65,536 after iteration k: gcd(65,536, 100) = 4, so every 100 / 4 = 25 iterations.
    assert params.trainer.eval_every_iters == 25
    assert params.trainer.checkpoint_every_iters == 25
    assert params.trainer.eval_episodes == 48  # 3 rounds of 16 eval envs
    assert list(params.policy.hidden_sizes) == [256, 256] and params.policy.activation == "relu"

    text, printed = out.read_text(), capsys.readouterr().out
    assert text.startswith(f"# Imported from {PPO} (an EmbodiChain training config)")
    for line in (
        "trainer.use_wandb: Weights & Biases logging",
        "trainer.wandb_project_name: Weights & Biases",
        "trainer.headless:",
        "trainer.events:",
        "configs/agents/rl/push_cube/gym_config.json: env.num_envs: overridden",
        "configs/agents/rl/push_cube/gym_config.json: its 6 other keys, not read",
    ):
        assert f"\n#   {line}" in text and f"\n  {line}" in printed
    # Values that map to none of our keys are listed by name only, the gym config's not at all.
    for value in ("embodichain-push_cube", "record_camera_data_async", "UR10", "extensions"):
        assert value not in text and value not in printed
    # Every key of the file is accounted for, as imported or not imported.
    for path in _leaf_paths(json.loads(PPO.read_text())):
        parts = path.split(".")
        prefixes = {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
        assert any(f" {p}" in printed or f"({p}" in printed for p in prefixes), path
    # Whole: DVC's stages track every section, so the file replaces params.yaml as it is.
    assert set(yaml.safe_load(text)) >= {"replay", "runtime", "evaluation", "video", "search"}


def test_the_tutorial_grpo_example_maps_its_own_keys(tmp_path, capsys):
    config = json.loads(GRPO.read_text())
    # Keys of other EmbodiChain versions, with no equivalent here: listed, not lost.
    config["algorithm"]["cfg"] |= {"kl_target": 0.0, "gae_lambda": 0.95}
    config["policy"]["actor"]["network_cfg"]["use_layernorm"] = True
    params = load_params(_import(tmp_path, _write(tmp_path, config)))
    grpo = params.algorithm.config
    assert params.algorithm.name == "grpo" and params.env.name == "push_cube"
    assert (grpo.lr, grpo.num_epochs, grpo.gamma, grpo.clip_eps) == (1e-4, 10, 0.99, 0.2)
    assert (grpo.ent_coef, grpo.kl_coef, grpo.group_size, grpo.eps) == (0.001, 0, 4, 1e-8)
    assert grpo.reset_every_rollout and grpo.episode_mode == "first_done"
    assert grpo.num_minibatches == 8  # 64 x 1024 / 8192
    printed = capsys.readouterr().out
    assert "env.cfg.num_envs: overridden by trainer.num_envs" in printed
    assert "env.cfg.extensions: task parameters" in printed
    assert "algorithm.cfg.kl_target: no equivalent here" in printed
    assert "algorithm.cfg.gae_lambda: GRPO has no critic" in printed
    assert "policy.actor.network_cfg.use_layernorm: no equivalent here" in printed


def test_absent_algorithm_keys_take_embodichains_defaults(tmp_path, capsys):
    config = json.loads(GRPO.read_text())
    del config["algorithm"]["cfg"]["kl_coef"]
    grpo = load_params(_import(tmp_path, _write(tmp_path, config))).algorithm.config
    assert grpo.kl_coef == 0.02  # GRPOCfg's default there; ours is 0
    assert "kl_coef: 0.02 <- EmbodiChain's kl_coef (absent" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("freq", "steps_per_iter", "iters"),
    [(100, 65_536, 25), (65_536, 65_536, 1), (1024, 65_536, 1), (10**6, 65_536, 15_625), (0, 8, 0)],
)
def test_embodichain_step_intervals_in_iterations(freq, steps_per_iter, iters):
    assert every_iters(freq, steps_per_iter) == iters


def test_evaluation_off_there_is_only_the_final_one_here(tmp_path, capsys):
    config = json.loads(PPO.read_text())
    config["trainer"]["enable_eval"] = False
    params = load_params(_import(tmp_path, _write(tmp_path, config), "--env", "PushCubeRL"))
    assert params.trainer.eval_every_iters == 0
    assert "trainer.eval_freq: evaluation is off" in capsys.readouterr().out


def test_the_env_can_be_named_when_gym_config_is_out_of_reach(tmp_path, capsys):
    source = _write(tmp_path, json.loads(PPO.read_text()))  # no gym_config beside it
    assert import_config_main([str(source), "-o", str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err == (
        f'error: {source}: env.id: missing; add "env": {{"id": "PushCubeRL"}}, point '
        "trainer.gym_config at EmbodiChain's gym_config.json, or pass --env PushCubeRL\n"
    )
    params = load_params(_import(tmp_path, source, "--env", "PushCubeRL"))
    assert params.env.name == "push_cube" and params.env.num_envs == 64
    assert "trainer.gym_config: not found" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            {"algorithm": {"name": "apg", "cfg": {}}},
            "algorithm.name: 'apg' has no equivalent here; use one of ['grpo', 'ppo']",
        ),
        (
            {"env": {"id": "StackBlocksRL"}},
            "env.id: env id 'StackBlocksRL' has no equivalent here; known: ['PushCubeRL'], "
            "or pass --env with one of ours ['cartpole', 'pendulum', 'push_cube', "
            "'push_cube_pixels']",
        ),
        (
            {"trainer": {"buffer_size": "long"}},
            "trainer.buffer_size: must be an integer >= 1, got 'long'",
        ),
        (  # validated like params.yaml, reported at the JSON key
            {"algorithm": {"name": "ppo", "cfg": {"learning_rate": -1}}},
            "algorithm.cfg.learning_rate: must be > 0, got -1.0 (imported as algorithm.ppo.lr)",
        ),
        (
            {"algorithm": {"name": "grpo", "cfg": {"group_size": 5}}},
            "algorithm.cfg.group_size: must divide env.num_envs (64), got 5 "
            "(imported as algorithm.grpo.group_size)",
        ),
        (
            {"policy": {"name": "vla"}},
            "policy.name: 'vla' (a vision-language-action model) is not supported: policies "
            "here are MLPs over named observation entries, with CNN encoders for camera images "
            "(policy.encoders); import it with actor_critic or actor_only",
        ),
    ],
)
def test_what_cannot_be_imported_is_one_line_naming_the_key(tmp_path, capsys, change, line):
    config = json.loads(GRPO.read_text())
    for section, value in change.items():
        config[section] = {**config[section], **value} if section == "trainer" else value
    source = _write(tmp_path, config)
    assert import_config_main([str(source), "-o", str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err == f"error: {source}: {line}\n"
    assert not (tmp_path / "p.yaml").exists()


def test_unreadable_files_are_one_line_errors(tmp_path, capsys):
    missing = tmp_path / "none.json"
    assert import_config_main([str(missing), "-o", str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err == (
        f"error: {missing}: cannot be read (No such file or directory); check the path\n"
    )
    broken = tmp_path / "broken.json"
    broken.write_text('{"trainer": {"seed": 1,}}')
    assert import_config_main([str(broken), "-o", str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err == (
        f"error: {broken}: line 1, column 24: malformed JSON (Expecting property name "
        "enclosed in double quotes)\n"
    )


def test_a_missing_input_and_an_existing_output_are_reported_together(tmp_path, capsys):
    out, missing = tmp_path / "params.yaml", tmp_path / "none.json"
    out.write_text("name: mine\n")
    assert import_config_main([str(missing), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: {missing}: cannot be read (No such file or directory); check the path\n"
        f"error: {out}: already exists; pass --force to overwrite it\n"
    )
    assert out.read_text() == "name: mine\n"


def test_an_existing_output_is_kept_unless_forced(tmp_path, capsys):
    out = tmp_path / "params.yaml"
    out.write_text("name: mine\n")
    assert import_config_main([str(PPO), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: {out}: already exists; pass --force to overwrite it\n"
    )
    assert out.read_text() == "name: mine\n"
    assert import_config_main([str(PPO), "-o", str(out), "--force"]) == 0
    assert load_params(out).name == "push_cube_ppo"


def test_names_are_sanitised_and_the_cli_runs_it(tmp_path, capsys):
    config = json.loads(GRPO.read_text())
    config["trainer"]["exp_name"] = "push cube/grpo v2"
    out = tmp_path / "params.yaml"
    assert main(["import-config", str(_write(tmp_path, config)), "-o", str(out)]) == 0
    assert load_params(out).name == "push-cube-grpo-v2"
    assert 'name: "push-cube-grpo-v2" <- trainer.exp_name (sanitised' in capsys.readouterr().out


def _refused(capsys, argv: list[str], out: Path) -> str:
    """Run a hostile import: exit 2, one `error:` line, no traceback; return the line."""
    before = sorted(p.name for p in out.parent.iterdir()) if out.parent.is_dir() else None
    assert import_config_main([*argv, "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    after = sorted(p.name for p in out.parent.iterdir()) if out.parent.is_dir() else None
    assert after == before  # nothing written, no temporary left
    return lines[0]


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"trainer": {"events": ' + _nested(5000) + "}}", "nested deeper than 64 levels"),
        (" " * (1 << 20) + "{}", "larger than 1 MiB"),
        ('{"trainer": {"seed": 1' + "0" * 5000 + "}}", "a value cannot be read (Exceeds"),
        ('{"trainer": {"exp_name": "\xff"}}'.encode("latin-1"), "byte 26: not UTF-8 text"),
    ],
    ids=["deep", "huge", "digits", "not-utf8"],
)
def test_unbounded_json_is_one_line(tmp_path, capsys, text, line):
    source = tmp_path / "in" / "train_config.json"
    source.parent.mkdir()
    source.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert _refused(capsys, [str(source)], tmp_path / "params.yaml").startswith(
        f"error: {source}: {line}"
    )


def test_a_deep_gym_config_is_one_line(tmp_path, capsys):
    config = json.loads(PPO.read_text())
    config["trainer"]["gym_config"] = "gym.json"
    (tmp_path / "gym.json").write_text('{"id": "PushCubeRL", "x": ' + _nested(5000) + "}")
    line = _refused(capsys, [str(_write(tmp_path, config))], tmp_path / "out" / "params.yaml")
    assert line.endswith(
        "trainer.gym_config: gym.json: nested deeper than 64 levels: not a config file"
    )


@pytest.mark.parametrize(
    ("where", "value", "line"),
    [
        (("algorithm", "cfg", "vf_coef"), "0.5", 'must be a number, got "0.5"'),
        (("algorithm", "cfg", "vf_coef"), True, "must be a number, got true"),
        (("algorithm", "cfg", "learning_rate"), "1e-4", 'must be a number, got "1e-4"'),
        (("algorithm", "cfg", "n_epochs"), 10.0, "must be an integer, got 10.0"),
        (("algorithm", "cfg", "batch_size"), True, "must be an integer >= 1, got True"),
        (("trainer", "seed"), "42", 'must be an integer, got "42"'),
        (("trainer", "device"), 0, "must be a string, got 0"),
        (("trainer", "exp_name"), ["a"], 'must be a string, got ["a"]'),
        (("trainer", "gym_config"), 7, "must be a string, got 7"),
        (
            ("policy", "actor", "network_cfg", "hidden_sizes"),
            [256, "256"],
            'must be an integer, got "256"',
        ),
        (
            ("policy", "actor", "network_cfg", "hidden_sizes"),
            [True],
            "must be an integer, got true",
        ),
    ],
)
def test_strings_and_booleans_are_never_numbers(tmp_path, capsys, where, value, line):
    config = json.loads(PPO.read_text())
    node = config
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    shutil.copytree(DATA / "configs", tmp_path / "configs")  # the gym config it names
    source = _write(tmp_path, config)
    error = _refused(capsys, [str(source)], tmp_path / "out" / "params.yaml")
    assert error == f"error: {source}: {'.'.join(where)}: {line}"


@pytest.mark.parametrize("key", ["truncate_at_first_done", "reset_every_rollout"])
def test_grpo_switches_must_be_booleans(tmp_path, capsys, key):
    config = json.loads(GRPO.read_text())
    config["algorithm"]["cfg"][key] = "false"  # a non-empty string would read as true
    error = _refused(capsys, [str(_write(tmp_path, config))], tmp_path / "out" / "params.yaml")
    assert error.endswith(f'algorithm.cfg.{key}: must be true or false, got "false"')


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink", "ancestor"])
def test_the_gym_config_is_read_only_from_the_configs_tree(tmp_path, capsys, kind):
    outside = tmp_path / "secrets" / "gym.json"
    outside.parent.mkdir()
    outside.write_text('{"id": "PushCubeRL", "token": "SECRET-TOKEN"}')
    tree = tmp_path / "project" / "configs"
    tree.mkdir(parents=True)
    ref = {
        "absolute": str(outside),
        "dotdot": "../../secrets/gym.json",
        "symlink": "gym.json",  # a link inside the tree to the file outside it
        "ancestor": "secrets/gym.json",  # found relative to a parent of the config's directory
    }[kind]
    if kind == "symlink":
        (tree / "gym.json").symlink_to(outside)
    config = json.loads(PPO.read_text())
    config["trainer"]["gym_config"] = ref
    source = tree / "train_config.json"
    source.write_text(json.dumps(config))
    error = _refused(capsys, [str(source)], tmp_path / "project" / "params.yaml")
    assert error == (
        f"error: {source}: trainer.gym_config: {ref!r} is outside {tree}, the config's "
        "directory (symlinks resolved); copy the gym config beside the config, or pass --env"
    )
    assert "SECRET" not in error


def test_keys_and_values_that_are_not_imported_never_reach_the_file(tmp_path, capsys):
    config = json.loads(GRPO.read_text())
    config["trainer"] |= {
        "api_token": "SECRET-TOKEN",  # a value of no key of ours: never copied
        "x\nseeds: [666]\nname: pwned": 1,  # a key that would end its header comment
        "y\u2028z\r": {"k": 2},  # line breaks to YAML too
    }
    out = _import(tmp_path, _write(tmp_path, config))
    text, printed = out.read_text(), capsys.readouterr().out
    params = load_params(out)
    assert params.seeds == [42] and params.name == "push_cube_grpo"
    assert "SECRET-TOKEN" not in text and "SECRET-TOKEN" not in printed
    assert "\n#   trainer.api_token: no equivalent here" in text
    assert "\n#   trainer.x\\nseeds: [666]\\nname: pwned: no equivalent here" in text
    assert "\n#   trainer.y\\u2028z\\r: no equivalent here" in text
    assert all(line.startswith("#") for line in text.split("\n\n")[0].splitlines())


def test_text_that_does_not_read_back_is_never_written(tmp_path):
    imported = import_config(GRPO)
    text = render(imported, GRPO)
    _check_reads_back(text, imported)
    with pytest.raises(ConfigImportError, match="would not read back as validated"):
        _check_reads_back(text.replace("\n    group_size: 4\n", "\n    group_size: 8\n"), imported)
    with pytest.raises(ConfigImportError, match="would not read back as validated"):
        _check_reads_back(text + "unknown: 1\n", imported)


def _special_outputs(tmp_path: Path) -> dict[str, Path]:
    fifo, folder, target = tmp_path / "fifo", tmp_path / "folder", tmp_path / "mine.yaml"
    os.mkfifo(fifo)
    folder.mkdir()
    target.write_text("name: mine\n")
    links = {"link-dev-null": "/dev/null", "link-fifo": fifo, "link-file": target}
    links |= {"link-dangling": tmp_path / "nowhere.yaml", "link-folder": folder}
    for name, to in links.items():
        (tmp_path / name).symlink_to(to)
    return {"dev-null": Path("/dev/null"), "fifo": fifo, "folder": folder} | {
        name: tmp_path / name for name in links
    }


@pytest.mark.parametrize("force", [False, True])
def test_the_output_is_only_ever_a_regular_file(tmp_path, capsys, force):
    outputs = _special_outputs(tmp_path)
    kinds = {
        "dev-null": "a character device",
        "fifo": "a FIFO",
        "folder": "a directory",
    }
    before = {name: (os.lstat(p).st_mode, os.lstat(p).st_ino) for name, p in outputs.items()}
    for name, out in outputs.items():
        argv = [str(PPO), *(["--force"] if force else [])]
        line = _refused(capsys, argv, out)
        why = (
            f"is {kinds[name]}, not a regular file; name a params.yaml to write"
            if name in kinds
            else "is a symbolic link; name the file itself (a link is never followed)"
        )
        assert line == f"error: {out}: {why}"
    after = {name: (os.lstat(p).st_mode, os.lstat(p).st_ino) for name, p in outputs.items()}
    assert after == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert (tmp_path / "mine.yaml").read_text() == "name: mine\n"
