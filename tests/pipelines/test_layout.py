"""Where stages write: `--params FILE` keeps its outputs apart from params.yaml's, which DVC
tracks (issue: `python -m pipelines --params other.yaml train` overwrote the main
experiment's metrics and checkpoints)."""

from pathlib import Path

import yaml

from pipelines.__main__ import main
from pipelines.layout import EXPERIMENTS, Layout

TINY = {
    "name": "tiny",
    "seeds": [3],
    "env": {"name": "cartpole", "num_envs": 4},
    "policy": {"hidden_sizes": [8], "activation": "relu"},
    "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 4 * 8 * 2, "num_steps": 8, "eval_every_iters": 1,
                "eval_episodes": 2, "checkpoint_every_iters": 0},
    "evaluation": {"episodes": 2, "seed": 123},
    "video": {"episodes": 1, "max_steps": 5},
}  # fmt: skip


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_the_project_params_file_keeps_the_paths_dvc_yaml_names(tmp_path):
    layout = Layout(tmp_path)
    assert layout.for_params(tmp_path / "params.yaml") == layout
    assert layout.for_params(tmp_path / "sub" / ".." / "params.yaml") == layout


def test_another_file_writes_under_experiments_by_its_path(tmp_path):
    layout = Layout(tmp_path)
    other = layout.for_params(tmp_path / "configs" / "ant.yaml")
    assert other.root == tmp_path / EXPERIMENTS / "configs" / "ant"
    assert other.final_checkpoint == (
        tmp_path / EXPERIMENTS / "configs/ant/outputs/seeds/0/checkpoints/final.pt"
    )
    # Two files of one name in different folders never share outputs.
    assert layout.for_params(tmp_path / "a" / "p.yaml") != layout.for_params(tmp_path / "b/p.yaml")
    outside = layout.for_params(tmp_path.parent / "elsewhere" / "ant.yaml")
    assert outside.root.parent == tmp_path / EXPERIMENTS
    assert outside.root.name.startswith("ant-") and len(outside.root.name) == len("ant-") + 8


def test_stages_of_another_params_file_leave_the_main_experiment_alone(
    tmp_path, monkeypatch, capsys
):
    """Train, evaluate and report with `--params other.yaml` after the main experiment ran:
    its files are byte for byte what they were, and the other file's outputs form the same
    tree under experiments/other/."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(TINY))
    assert main(["train"]) == 0
    main_outputs = {**tree(tmp_path / "outputs"), **tree(tmp_path / "metrics")}
    assert "seeds/3/checkpoints/final.pt" in main_outputs

    other = {**TINY, "name": "other", "policy": {"hidden_sizes": [4], "activation": "tanh"}}
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    capsys.readouterr()
    for stage in ("train", "evaluate", "report"):
        assert main([stage, "--params", "other.yaml"]) == 0, stage
        err = capsys.readouterr().err
        assert f"{stage}: other.yaml is not the project's params.yaml: its outputs go under " \
            f"{Path(EXPERIMENTS) / 'other'}/" in err  # fmt: skip

    assert {**tree(tmp_path / "outputs"), **tree(tmp_path / "metrics")} == main_outputs
    assert not (tmp_path / "reports").exists()
    apart = Layout(Path(EXPERIMENTS) / "other", seed=3)
    for path in (apart.final_checkpoint, apart.curve, apart.eval_metrics, apart.report):
        assert path.is_file(), path
