"""The suite's tables (benchmarks/suite/report.py)."""

import math

import pytest

from benchmarks.suite.report import beyond_floor


def test_cpu_beyond_the_simulators_floor():
    # ours 60 s, SB3 100 s, the simulator 40 s of each: totals 0.6, beyond the floor 20 / 60
    assert beyond_floor(60.0, 100.0, 40.0) == pytest.approx(1 / 3)
    assert beyond_floor(40.0, 100.0, 0.0) == 0.4  # no floor: the ratio of totals
    assert math.isnan(beyond_floor(50.0, 30.0, 30.0))  # SB3 spent nothing beyond it
