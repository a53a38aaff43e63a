"""The suite's tables (benchmarks/suite/report.py)."""

import math

import pytest

from benchmarks.suite.report import beyond_floor


def test_cpu_beyond_the_simulators_floor():
    # ours 60 s, SB3 100 s, the simulator 40 s of each: totals 0.6, beyond the floor 20 / 60
    assert beyond_floor(60.0, 100.0, 40.0) == pytest.approx(1 / 3)
    assert beyond_floor(40.0, 100.0, 0.0) == 0.4  # no floor: the ratio of totals
    assert math.isnan(beyond_floor(50.0, 30.0, 30.0))  # SB3 spent nothing beyond it


def test_a_cpu_ratio_across_kinds_of_cpu_is_named_and_not_judged(capsys):
    """SB3's runs on another CPU than ours': the row still shows both times and their ratio,
    names each side's CPU and passes no verdict on the CPU target; one kind of CPU: judged."""
    from benchmarks.suite.report import print_tasks
    from benchmarks.suite.scores import Task

    def task(sb3_kind: str) -> Task:
        return Task("Hopper-v5", 100_000, 17.0, {"ours": [2_000.0], "sb3": [740.0]},
                    {"ours": [400.0], "sb3": [2_000.0]},
                    {"ours": ["AMD EPYC AVX512"], "sb3": [sb3_kind]})  # fmt: skip

    print_tasks([task("AMD EPYC AVX2"), task("AMD EPYC AVX512")], seeds=1)
    mixed, same = capsys.readouterr().out.strip().splitlines()[2:]
    assert "400.0 / 2,000.0 = 0.20 (ours on AMD EPYC AVX512; SB3 on AMD EPYC AVX2: not side " \
           "by side)" in mixed  # fmt: skip
    assert mixed.endswith("; - |")
    assert "= 0.20 |" in same and same.endswith("; met |")
