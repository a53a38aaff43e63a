"""What tasks are scored and costed against (benchmarks/suite/references.py): the random
policy's and a constant action's returns, the simulator's CPU, the cache that keeps them."""

import math
from pathlib import Path

import pytest

from benchmarks.suite.jobs import read_json
from benchmarks.suite.references import cached, simulator_cost, still_return
from pipelines.files import write_json


def test_cached_measures_each_key_once(tmp_path: Path):
    measured: list[str] = []

    def measure(key: str) -> float:
        measured.append(key)
        return float(len(key))

    assert cached(tmp_path / "c.json", ["a", "bb"], measure) == {"a": 1.0, "bb": 2.0}
    assert cached(tmp_path / "c.json", ["bb", "ccc"], measure) == {"bb": 2.0, "ccc": 3.0}
    assert measured == ["a", "bb", "ccc"]


def test_a_constant_mid_range_action_is_a_reference_only_for_continuous_actions():
    """Pendulum's mid-range torque (0) leaves the pole swinging about the bottom: each step
    costs its angle from upright squared (pi^2 at the bottom), so a 200-step episode returns
    far below a balanced pole's ~0. CartPole's actions are discrete: there is no "do
    nothing" to measure."""
    assert still_return("CartPole-v1") is None
    still = still_return("Pendulum-v1", episodes=3)
    assert -200 * math.pi**2 < still < -500
    assert still == still_return("Pendulum-v1", episodes=3)  # fixed seeds: the same episodes


def test_ant_pays_for_lying_still():
    """Ant-v5's healthy reward (1 a step while the torso stays in range) outlasts its costs
    when every torque is 0: ~990 over a 1,000-step episode, above what SB3's SAC reaches at
    100k env steps (~540): the suite prints it beside each task."""
    pytest.importorskip("mujoco", reason="the mujoco extra installs MuJoCo")
    assert 950 < still_return("Ant-v5", episodes=1) <= 1_000


def test_the_simulators_cost_per_step_is_positive_and_orders_tasks_by_their_physics():
    """Hopper's MuJoCo step (5 substeps of a contact model) costs more CPU than CartPole's
    few lines of numpy."""
    pytest.importorskip("mujoco", reason="the mujoco extra installs MuJoCo")
    cartpole, hopper = simulator_cost("CartPole-v1", 500), simulator_cost("Hopper-v5", 500)
    assert 0 < cartpole < hopper < 0.01


def test_cached_keeps_what_another_process_wrote_meanwhile(tmp_path: Path):
    """Two suites sharing one results folder: neither's entries are lost to the other's write."""
    path = tmp_path / "c.json"

    def measure(key: str) -> float:
        write_json(path, read_json(path) | {f"other {key}": 0.5})  # the other process's write
        return float(len(key))

    write_json(path, {})
    assert cached(path, ["a", "bb"], measure) == {"a": 1.0, "bb": 2.0}
    assert read_json(path) == {"other a": 0.5, "a": 1.0, "other bb": 0.5, "bb": 2.0}
