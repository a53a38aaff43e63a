import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.params import ParamsError, load_params, parse_params
from rlcore.presets import PRESETS

REPO = Path(__file__).resolve().parents[2]


def test_the_default_experiment_is_the_tuned_push_cube_ppo_preset():
    params = load_params(REPO / "params.yaml")
    assert params.env.name == "push_cube" and params.algorithm.name == "ppo"
    experiment = params.experiment()
    assert experiment.algo == params.algorithm.ppo
    # The preset's settings (what the benchmarks measure), plus periodic checkpoints.
    tuned = PRESETS["push_cube"]
    trainer = dataclasses.replace(tuned.trainer, checkpoint_every_iters=50)
    assert experiment == dataclasses.replace(tuned, trainer=trainer)
    assert len(params.schedule.cron.split()) == 5


def test_grpo_is_chosen_by_name_with_its_own_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("algorithm:\n  name: grpo\n  grpo:\n    group_size: 8\n")
    experiment = load_params(path).experiment()
    assert experiment.algorithm == "grpo" and experiment.algo.group_size == 8


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("algorithm:\n  ppo:\n    clipeps: 0.1\n", "algorithm.ppo.clipeps: unknown key"),
        ("trainer:\n  num_steps: many\n", "trainer.num_steps: Input should be a valid integer"),
        ("algorithm:\n  ppo:\n    clip_eps: -1\n", "algorithm.ppo.clip_eps: must be > 0, got -1"),
        ("env:\n  num_envs: 0\n", "env.num_envs: must be a positive integer, got 0"),
        ("env: [1, 2\n", "line 2, column 1: malformed YAML"),
        ("- 1\n- 2\n", "<top level>: must be a mapping, got list"),
        (
            "algorithm:\n  name: a2c\n",
            "algorithm.name: 'a2c': choose one of ['grpo', 'ppo', 'sac'] or 'package.module:name'",
        ),
        (
            "algorithm:\n  name: no_such_pkg.algos:a2c\n",
            "algorithm.name: 'no_such_pkg.algos:a2c': cannot import module 'no_such_pkg.algos'",
        ),
        ("algorithm:\n  dqn:\n    lr: 0.1\n", "algorithm.dqn: unknown key"),
        ("algorithm:\n  sac:\n    tau: 2\n", "algorithm.sac.tau: must be in (0, 1], got 2"),
        ("replay:\n  batch_size: 0\n", "replay.batch_size: must be a positive integer, got 0"),
        (
            "replay:\n  offline: {path: data, fraction: 2}\n",
            "replay.offline.fraction: must be in [0, 1], got 2",
        ),
        # Layouts of other tools and older versions: each says what to write instead.
        ("algorithm: ppo\n", "algorithm: must be a mapping; write `algorithm: {name: ppo, ppo:"),
        ("ppo:\n  lr: 0.1\n", "ppo: algorithm settings live under `algorithm.ppo`"),
        (
            "algorithm:\n  name: ppo\n  cfg: {lr: 0.1}\n",
            "algorithm.cfg: an EmbodiChain-style section",
        ),
        (
            "algorithm:\n  grpo:\n    group_size: 1\n",
            "algorithm.grpo.group_size: must be an int >= 2, got 1",
        ),
        (
            "env:\n  num_envs: 6\nalgorithm:\n  name: grpo\n",
            "algorithm.grpo.group_size: must divide env.num_envs (6), got 4",
        ),
    ],
)
def test_bad_params_fail_with_one_clear_line(tmp_path, text, line):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert len(info.value.lines) == 1
    assert info.value.lines[0].startswith(line), info.value.lines


def test_sac_selects_its_section_and_the_replay_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(
        "algorithm:\n  name: sac\n  sac: {tau: 0.01}\n  ppo: {lr: 0.5}\n"
        "replay: {batch_size: 64, offline: {path: data/set}}\n"
    )
    experiment = load_params(path).experiment()
    assert experiment.algorithm == "sac" and experiment.algo.tau == 0.01
    assert experiment.replay.batch_size == 64
    assert (
        experiment.replay.offline.path == "data/set" and experiment.replay.offline.fraction == 0.5
    )


def test_stage_cli_rejects_bad_params_before_touching_outputs(tmp_path):
    (tmp_path / "params.yaml").write_text("algorithm:\n  ppo:\n    clip_eps: -1\n")
    metrics = tmp_path / "metrics" / "train.json"
    metrics.parent.mkdir()
    metrics.write_text('{"previous": 1}')
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "train"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: params.yaml: algorithm.ppo.clip_eps: must be > 0, got -1.0"
    )
    assert metrics.read_text() == '{"previous": 1}'
    assert not (tmp_path / "outputs").exists()


def test_every_search_setting_can_be_set_like_dvc_exp_run_s(tmp_path):
    """`dvc exp run -S search.overrides.trainer.total_env_steps=...` edits params.yaml with
    DVC's own override code; nested paths in `search` make every setting reachable."""
    import shutil
    from pathlib import Path

    from dvc.utils.hydra import apply_overrides

    path = tmp_path / "params.yaml"
    shutil.copy(Path(__file__).parents[2] / "params.yaml", path)
    apply_overrides(
        path,
        [
            "search.overrides.trainer.total_env_steps=5000",
            "search.space.algorithm.ppo.lr.high=0.01",
            "search.space.policy.hidden_sizes.choices=[[8],[16]]",
        ],
    )
    search = load_params(path).search
    assert search.overrides["trainer.total_env_steps"] == 5000
    assert search.space["algorithm.ppo.lr"].high == 0.01
    assert search.space["policy.hidden_sizes"].choices == [[8], [16]]


def test_search_paths_may_be_nested_or_dotted_alike():
    nested = {"space": {"algorithm": {"ppo": {"lr": {"type": "float", "low": 0.1, "high": 1}}}},
              "overrides": {"trainer": {"num_steps": 8}}}  # fmt: skip
    dotted = {"space": {"algorithm.ppo.lr": {"type": "float", "low": 0.1, "high": 1}},
              "overrides": {"trainer.num_steps": 8}}  # fmt: skip
    assert parse_params({"search": nested}).search == parse_params({"search": dotted}).search
