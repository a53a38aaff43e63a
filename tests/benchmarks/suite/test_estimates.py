"""Each run's CPU estimate from two short runs (benchmarks/suite/estimates.py)."""

from typing import Any

import pytest

from benchmarks.suite.estimates import estimate
from benchmarks.suite.jobs import Job


def test_estimate_extrapolates_the_steady_cost_per_env_step():
    """A fake run's CPU is 2 s of setup + 0.01 s per env step. SB3 PPO's probes: 2,048 and
    4,096 steps, 22.48 and 42.96 s: 0.01 s per step (100 per CPU s); for 300k steps
    42.96 + 0.01 * (300,000 - 4,096) = 3,002 s."""
    probes: list[int] = []

    def runner(job: Job, eval_episodes: int) -> dict[str, Any]:
        probes.append(job.steps)
        return {"cpu_s": 0.01 * job.steps + 2.0, "env_steps": job.steps}

    found = estimate(Job("ppo", "Hopper-v5", "sb3", 0, 300_000), runner)
    assert probes == [2_048, 4_096]
    assert found == pytest.approx({"steps_per_cpu_s": 100.0, "cpu_s": 3_002.0})
    assert estimate(Job("ppo", "Hopper-v5", "sb3", 0, 4_096), runner) is None  # as short
    assert probes == [2_048, 4_096]  # nothing probed for a run no longer than its probes
