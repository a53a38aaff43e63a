"""docs/library.md: its examples run as written, and `experiment_for` is what params.yaml's
`preset` gives the pipeline's stages."""

import re
import runpy
from pathlib import Path

import pytest

import rlcore
from pipelines.params import parse_params

DOC = Path(__file__).resolve().parents[1] / "docs" / "library.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


@pytest.mark.parametrize("index", [0, 1], ids=["ppo", "sac"])
def test_the_library_examples_run(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the SAC example writes its checkpoint here
    script = tmp_path / "example.py"
    script.write_text(examples()[index])
    runpy.run_path(str(script), run_name="__main__")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("{'eval/episode_return': ")
    returns = float(re.search(r"'eval/episode_return': (-?[\d.e+-]+)", last)[1])
    assert returns > -1000  # Pendulum: a random policy scores about -1200; both learn
    if index == 1:
        assert (tmp_path / "sac_pendulum.pt").is_file()


@pytest.mark.parametrize(
    ("env_name", "algorithm"),
    [
        ("pendulum", "ppo"),
        ("pendulum", "sac"),
        ("gymnasium:Hopper-v5", "sac"),
        ("gymnasium:Ant-v5", "ppo"),
        ("gymnasium:Acrobot-v1", "grpo"),
        ("push_cube_pixels", "sac"),
        ("cartpole", "grpo"),
    ],
)
def test_experiment_for_is_what_params_preset_auto_gives(env_name, algorithm):
    params = parse_params({"env": {"name": env_name}, "algorithm": {"name": algorithm}})
    assert rlcore.experiment_for(env_name, algorithm, seed=3) == params.experiment(seed=3)


def test_a_named_preset_for_another_env_keeps_its_stop_targets_but_not_its_env_options():
    data = {"preset": "gym_cartpole", "env": {"name": "gymnasium:Acrobot-v1"}}
    params = parse_params(data)
    ours = rlcore.experiment_for("gymnasium:Acrobot-v1", preset="gym_cartpole")
    assert ours == params.experiment(seed=0) and ours.env.options == {}
    assert ours.trainer.stop_at_eval_return == 475


def test_rlcore_names_its_api_without_importing_torch_for_config():
    assert {"Trainer", "experiment_for", "configure_cpu", "ExperimentConfig"} <= set(rlcore.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = rlcore.nothing
