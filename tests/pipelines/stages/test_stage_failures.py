"""Stages fail loudly and leave their previous outputs whole (issue: nothing lost, nothing
silent): all-or-none outputs, stale temporaries, broken result files, non-finite results."""

import json
import shutil

import pytest
import torch
import yaml

import pipelines.files
from pipelines.__main__ import main
from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.train import train
from rlcore.checkpoint import load_checkpoint, save_checkpoint
from rlcore.envs import CartPole

TINY = {
    "name": "tiny",
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 8 * 16 * 4, "num_steps": 16, "eval_every_iters": 2,
                "eval_episodes": 4, "checkpoint_every_iters": 2},
    "evaluation": {"episodes": 5, "seed": 123},
}  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One trained seed (outputs of `train` and `evaluate`) to copy into each test."""
    root = tmp_path_factory.mktemp("trained")
    (root / "params.yaml").write_text(yaml.safe_dump(TINY))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert main(["train"]) == 0 and main(["evaluate"]) == 0
    return root


@pytest.fixture
def project(trained, tmp_path, monkeypatch):
    shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return Layout()


def outputs_of_train(layout):
    return [layout.final_checkpoint, layout.curve, layout.train_metrics, layout.provenance]


def test_train_replaces_checkpoint_curve_and_metrics_all_or_none(project, monkeypatch):
    before = {path: path.read_bytes() for path in outputs_of_train(project)}

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pipelines.files, "_dump_csv", disk_full)  # the curve, written 2nd
    with pytest.raises(OSError, match="No space left"):
        train(parse_params(TINY), project)
    assert {path: path.read_bytes() for path in before} == before
    leftovers = [p.name for p in project.root.rglob(".*.tmp*")]
    assert leftovers == []


def test_an_output_train_cannot_write_fails_before_training(project, capsys):
    final = project.final_checkpoint.read_bytes()
    project.curve.unlink()
    project.curve.mkdir()  # the curve's path is taken by a directory
    assert main(["train"]) == 1
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        f"error: train: {project.curve}: is a directory where the stage writes a file; remove it"
    ]
    assert "[train]" not in out  # not one iteration ran
    assert project.final_checkpoint.read_bytes() == final


def test_stale_temporaries_of_an_interrupted_write_are_removed_on_the_next_run(project):
    folder = project.checkpoints
    stale = [folder / ".final.pt.k1l2.tmp", folder / ".resume.pt.q9.tmp"]
    metrics = project.curve.parent / ".curve.csv.zz.tmp.csv"
    for path in [*stale, metrics]:
        path.write_bytes(b"half a file")
    train(parse_params(TINY), project)
    assert not any(path.exists() for path in [*stale, metrics])


@pytest.mark.parametrize(
    ("name", "content", "line"),
    [
        ("eval.json", "{}", "metrics/seeds/0/eval.json: `episodes` is missing"),
        ("train.json", "{}", "metrics/seeds/0/train.json: `env_steps` is missing"),
        (
            "eval.json",
            '{"episodes": 5, "return_mean": NaN, "return_std": 0, "return_min": 0, '
            '"return_max": 0}',
            "metrics/seeds/0/eval.json: `return_mean` is nan, not a finite number",
        ),
        ("train.json", '{"env_steps": "many"}', "`env_steps` must be a number, got 'many'"),
        (
            "provenance.json",
            '{"cpu": 1}',
            "metrics/seeds/0/provenance.json: expected a JSON object with `cpu` and `cpu_kernels`",
        ),
    ],
)
def test_report_refuses_result_files_that_break_their_schema(project, capsys, name, content, line):
    (project.seed_metrics / "0" / name).write_text(content)
    assert main(["report"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    assert not project.summary_metrics.exists()


def test_a_checkpoint_with_nan_weights_is_not_evaluated(project, capsys):
    state = load_checkpoint(project.final_checkpoint)
    first = next(iter(state["policy"]))
    state["policy"][first] = torch.full_like(state["policy"][first], float("nan"))
    save_checkpoint(project.final_checkpoint, state)
    before = project.eval_metrics.read_bytes()
    assert main(["evaluate"]) == 1
    err = capsys.readouterr().err
    assert f"checkpoint {project.final_checkpoint} holds non-finite weights ({first}" in err
    assert "Traceback" not in err and project.eval_metrics.read_bytes() == before


def test_an_env_that_yields_nan_rewards_fails_evaluation_instead_of_scoring_nan(
    project, capsys, monkeypatch
):
    real_step = CartPole.step

    def nan_rewards(self, actions, slot):
        real_step(self, actions, slot)
        slot.reward.fill_(float("nan"))

    monkeypatch.setattr(CartPole, "step", nan_rewards)
    before = project.eval_metrics.read_bytes()
    assert main(["evaluate"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "5 of 5 episode returns are NaN or infinite" in err[0], err
    assert project.eval_metrics.read_bytes() == before
    assert json.loads(before)["return_mean"] == json.loads(before)["return_mean"]  # finite
