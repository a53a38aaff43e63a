"""`python -m benchmarks.suite`, one tiny real run of ours and SB3 (benchmarks/suite/cli.py)."""

import json
from pathlib import Path

import pytest

from benchmarks.suite.cli import main, parse_args
from benchmarks.suite.jobs import Job, load_result
from benchmarks.suite.references import random_return


def test_tiny_real_suite_writes_results_and_a_table(tmp_path: Path, capsys):
    """CartPole-v1, ours and SB3, seed 0, 2,048 env steps, 2 evaluation episodes; then the
    same command again, which finds both runs done and trains nothing."""
    pytest.importorskip("stable_baselines3", reason="the bench extra installs stable-baselines3")
    argv = ["--envs", "CartPole-v1", "--seeds", "0", "--steps", "2048", "--eval-episodes", "2",
            "--results", str(tmp_path), "--json", str(tmp_path / "suite.json")]  # fmt: skip
    main(argv)
    for impl in ("ours", "sb3"):
        job = Job("ppo", "CartPole-v1", impl, 0, 2_048)
        result = load_result(tmp_path / job.filename, job)
        assert result is not None and result["env_steps"] >= 2_048 and result["cpu_s"] > 0
        assert 8 <= result["return"] <= 500  # a CartPole episode's return
    random = json.loads((tmp_path / "random.json").read_text())["CartPole-v1"]
    assert random == random_return("CartPole-v1")  # fixed seeds: the same episodes
    out = capsys.readouterr().out
    assert "| CartPole-v1 (2,048) |" in out
    assert "| classic control (1) |" in out
    # Its traits, measured once and cached: 4 observations, 2 choices, a pole that falls.
    assert "| CartPole-v1 | 4 | 2 discrete | early (terminated) | 1 ± 0 | - |" in out
    traits = json.loads((tmp_path / "traits.json").read_text())["CartPole-v1"]
    assert traits["terminates_early"] and traits["max_episode_steps"] == 500
    # The simulator's floor, timed once and cached: positive, and below each run's CPU.
    per_step = json.loads((tmp_path / "simulator.json").read_text())["CartPole-v1"]
    assert 0 < per_step * 2_048 < result["cpu_s"]
    assert "| CartPole-v1 | " in out and "| train CPU beyond the floor, ours / SB3 |" in out
    summary = json.loads((tmp_path / "suite.json").read_text())
    assert set(summary["tasks"][0]["returns"]) == {"ours", "sb3"}
    main(argv)
    assert "2 of 2 runs done earlier; 0 to run" in capsys.readouterr().out


def test_family_picks_its_tasks_and_conflicts_with_envs(capsys):
    args = parse_args(["--algorithm", "sac", "--family", "classic"])
    assert args.envs == ["MountainCarContinuous-v0", "Pendulum-v1"]
    assert len(parse_args(["--family", "mujoco"]).envs) == 11
    with pytest.raises(SystemExit) as stop:
        parse_args(["--family", "mujoco", "--envs", "Hopper-v5"])
    assert stop.value.code == 2
    assert "--envs and --family: give one of them" in capsys.readouterr().err
