import json
from pathlib import Path

import pytest
import yaml

from pipelines.import_config import import_config_main
from pipelines.params import load_params

TUTORIAL = Path(__file__).parent / "data" / "embodichain_push_cube_ppo.json"


def test_the_tutorial_config_imports_as_valid_params(tmp_path, capsys):
    out = tmp_path / "params.yaml"
    assert import_config_main([str(TUTORIAL), "-o", str(out)]) == 0
    params = load_params(out)
    ppo = params.algorithm.config
    assert params.algorithm.name == "ppo" and params.env.name == "push_cube"  # PushCubeRL
    assert (ppo.lr, ppo.num_epochs, ppo.gamma, ppo.gae_lambda) == (1e-4, 10, 0.99, 0.95)
    assert (ppo.clip_eps, ppo.ent_coef, ppo.vf_coef, ppo.max_grad_norm) == (0.2, 0.01, 0.5, 0.5)
    # 64 envs x 1024 steps = 65,536 samples per iteration; batches of 8,192 -> 8 minibatches.
    assert ppo.num_minibatches == 8
    assert params.trainer.num_steps == 1024 and params.env.num_envs == 64
    assert params.trainer.total_env_steps == 1000 * 1024 * 64  # iterations x steps x envs
    # Every 100 env steps there = every iteration here (an iteration is 65,536 env steps).
    assert params.trainer.eval_every_iters == 1 and params.trainer.checkpoint_every_iters == 1
    assert params.trainer.eval_episodes == 16 * 3
    assert params.seeds == [42] and params.name == "push_cube_ppo"
    assert list(params.policy.hidden_sizes) == [256, 256] and params.policy.activation == "relu"
    text = out.read_text()
    printed = capsys.readouterr().out
    for dropped in ("trainer.use_wandb", "trainer.headless", "gym_config.cfg.extensions"):
        assert f"#   {dropped}:" in text and f"not imported: {dropped}:" in printed
    assert set(yaml.safe_load(text)) >= {"runtime", "replay", "evaluation", "video", "schedule"}


def test_a_grpo_config_maps_its_own_keys(tmp_path):
    config = json.loads(TUTORIAL.read_text())
    config["algorithm"] = {
        "name": "grpo",
        "cfg": {
            "learning_rate": 1e-4,
            "group_size": 4,
            "kl_coef": 0,
            "truncate_at_first_done": True,
        },
    }
    source = tmp_path / "grpo.json"
    source.write_text(json.dumps(config))
    out = tmp_path / "params.yaml"
    assert import_config_main([str(source), "-o", str(out), "--env", "cartpole"]) == 0
    grpo = load_params(out).algorithm.config
    assert (grpo.group_size, grpo.kl_coef, grpo.episode_mode) == (4, 0, "first_done")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"env": {"id": "PushCubeRL"}, "algorithm": {"name": "dqn", "cfg": {}}},
            "algorithm.name: 'dqn' has no equivalent; ours are ('ppo', 'grpo', 'sac')",
        ),
        (
            {"env": {"id": "StackBlocks"}},
            "env.id: 'StackBlocks' has no equivalent here; pass --env NAME",
        ),
        ({}, "env: no env section with an `id`; pass --env NAME"),
    ],
)
def test_what_cannot_be_imported_is_one_clear_line(tmp_path, capsys, change, message):
    config = json.loads(TUTORIAL.read_text())
    del config["trainer"]["gym_config"]
    config.update(change)
    source = tmp_path / "train_config.json"
    source.write_text(json.dumps(config))
    assert import_config_main([str(source), "-o", str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err == f"error: {source}: {message}\n"
    assert not (tmp_path / "p.yaml").exists()


def test_missing_files_and_existing_outputs_are_refused(tmp_path, capsys):
    assert import_config_main([str(tmp_path / "none.json")]) == 2
    assert "none.json: cannot be read" in capsys.readouterr().err
    out = tmp_path / "params.yaml"
    out.write_text("name: mine\n")
    assert import_config_main([str(TUTORIAL), "-o", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert out.read_text() == "name: mine\n"
    assert import_config_main([str(TUTORIAL), "-o", str(out), "--force"]) == 0
