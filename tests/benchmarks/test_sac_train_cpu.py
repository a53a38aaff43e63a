"""benchmarks/sac_train_cpu.py: a run's CPU split into its updates and the rest."""

import json

import pytest

from benchmarks.sac_train_cpu import main


def test_a_short_run_counts_its_updates_and_splits_its_cpu(tmp_path):
    out = tmp_path / "cpu.json"
    main(["--envs", "Pendulum-v1", "--steps", "1200", "--compile", "false", "--json", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["env"] == "Pendulum-v1" and not row["compiled"]
    # 1,000 random warm-up steps, then an update per env step after them
    assert 100 <= row["updates"] <= 200
    assert 0 < row["update_s"] < row["run_s"]
    assert row["rest_s"] == pytest.approx(row["run_s"] - row["update_s"])
    assert row["update_mean_ms"] > 0 and row["update_median_ms"] > 0


def test_a_step_count_that_is_not_positive_is_one_line():
    with pytest.raises(SystemExit, match="--steps must be a positive integer"):
        main(["--steps", "0"])
