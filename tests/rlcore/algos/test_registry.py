import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlcore.algos.base import missing_members
from rlcore.algos.registry import (
    AlgorithmSpec,
    UnknownAlgorithmError,
    algorithm_names,
    algorithm_spec,
    register_algorithm,
    section_name,
)
from rlcore.checkpoint import load_checkpoint
from rlcore.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
PLUGINS = Path(__file__).resolve().parent / "plugins"


def test_builtins_are_registered_without_importing_torch():
    code = (
        "import sys; from rlcore.algos.registry import algorithm_names;"
        "print(algorithm_names(), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['grpo', 'ppo', 'sac'] False"


def test_trained_policies_are_built_without_the_training_code():
    """Evaluation and videos build each builtin's policy from its light factory: the same
    class the algorithm trains, without importing the algorithms' training code."""
    code = (
        "import sys\n"
        "from rlcore.algos.registry import algorithm_spec, default_config\n"
        "from rlcore.config import EnvConfig, ExperimentConfig\n"
        "from rlcore.envs import make_env\n"
        "from rlcore.trained import build_policy\n"
        "for name in ('ppo', 'grpo', 'sac'):\n"
        "    cfg = ExperimentConfig(EnvConfig('pendulum', num_envs=4), algorithm=name,\n"
        "                           algo=default_config(name))\n"
        "    print(name, type(build_policy(cfg, make_env(cfg.env))).__name__)\n"
        "print(any(m in sys.modules for m in ('rlcore.algos.ppo', 'rlcore.algos.grpo',\n"
        "          'rlcore.algos.sac', 'rlcore.trainer', 'rlcore.collector')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:4] == [
        "ppo ActorCritic", "grpo Actor", "sac SquashedGaussianActor", "False"
    ]  # fmt: skip
    for name in ("ppo", "grpo", "sac"):  # the trainer's factory is the same function
        spec = algorithm_spec(name)
        assert spec.load().make_policy is spec.load_policy_factory()


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(UnknownAlgorithmError, match=r"choose one of \['grpo', 'ppo', 'sac'"):
        algorithm_spec("a2c")


def test_a_name_is_registered_once():
    spec = algorithm_spec("ppo")
    assert register_algorithm(spec) is spec  # the same spec again is harmless
    with pytest.raises(ValueError, match="already registered"):
        register_algorithm(AlgorithmSpec("ppo", dict, "elsewhere:PPO"))
    assert "ppo" in algorithm_names()


def test_module_names_select_their_params_section():
    assert section_name("my_pkg.algos:reinforce") == "reinforce"
    assert section_name("sac") == "sac"


def test_an_algorithm_from_a_user_module_trains_through_the_cli(tmp_path):
    # Nothing in the package knows `toy`: the name imports the module, which registers it.
    params = {
        "name": "toy",
        "seeds": [0],
        "env": {"name": "cartpole", "num_envs": 4},
        "policy": {"hidden_sizes": [8]},
        "algorithm": {"name": "toy_algorithm:toy", "toy": {"lr": 0.01}},
        "trainer": {"total_env_steps": 4 * 8 * 3, "num_steps": 8, "eval_episodes": 2},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {"PYTHONPATH": f"{REPO}:{PLUGINS}", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "pipelines", "train", "--seed", "0"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "metrics/seeds/0/train.json").read_text())
    assert metrics["iterations"] == 3 and metrics["env_steps"] == 96
    checkpoint = load_checkpoint(tmp_path / "outputs/seeds/0/checkpoints/final.pt")
    assert checkpoint["algo"]["updates"] == 3  # the toy's own update ran every iteration
    command = [sys.executable, "-m", "pipelines", "evaluate", "--seed", "0"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


def test_every_builtin_keeps_the_whole_contract_and_a_class_lacking_it_is_refused():
    """The Trainer calls what `rlcore.algos.base.Algorithm` declares, without probing: an
    algorithm class missing a member fails when it is loaded, in one line naming it."""
    for name in ("ppo", "grpo", "sac"):
        assert missing_members(algorithm_spec(name).load()) == []
    spec = AlgorithmSpec("not_an_algorithm", dict, "collections:OrderedDict")
    with pytest.raises(ConfigError, match="lacks off_policy, same_step_reset, groups, "):
        spec.load()
    assert "rank_state_dict" in missing_members(type("Partial", (), {"off_policy": False}))


def test_configs_declare_what_reports_show_of_them():
    from dataclasses import dataclass

    from rlcore.algos.config import GRPOConfig, PPOConfig
    from rlcore.algos.registry import ReportedSettings, reported_settings
    from rlcore.algos.sac_config import SACConfig

    ppo = reported_settings(PPOConfig(lr=1e-3, num_epochs=5))
    assert ppo.optimizer == (
        "lr 0.001 (constant)", "5 epochs x 4 minibatches", "gamma 0.99", "GAE lambda 0.95",
        "clip 0.2",
    )  # fmt: skip
    assert ppo.summary is None
    mixed = reported_settings(PPOConfig(precision="bfloat16")).optimizer
    assert mixed[-1] == "bf16 matmuls"
    grpo = reported_settings(GRPOConfig(group_size=4))
    assert grpo.summary == "groups of 4, restart_groups, KL coefficient 0"
    sac = reported_settings(SACConfig())
    assert sac.optimizer == ("lr 0.0003", "gamma 0.99", "tau 0.005")

    @dataclass(frozen=True)
    class Undeclared:  # an outside algorithm's config that declares nothing
        lr: float = 1e-3

    assert reported_settings(Undeclared()) == ReportedSettings()
