"""benchmarks/sac_update.py: the share of an update that is matrix products."""

import time

from benchmarks.common import matmul_ms_per_call
from benchmarks.sac_update import ACTION_DIM, OBS_DIM, build, random_batch


def test_matrix_products_are_a_real_part_of_the_update_and_no_more_than_all_of_it():
    algo = build("float32", (64, 64))
    batch = random_batch(64, OBS_DIM, ACTION_DIM)
    algo.update(batch)
    start = time.process_time()
    for _ in range(20):
        algo.update(batch)
    update_ms = (time.process_time() - start) / 20 * 1e3
    matmul_ms = matmul_ms_per_call(lambda: algo.update(batch))
    assert 0.0 < matmul_ms < 2 * update_ms  # the profiler's own overhead slows the rest


def test_each_setting_reports_its_first_update_for_the_sizes_asked(tmp_path):
    import json

    from benchmarks.sac_update import main

    out = tmp_path / "sac.json"
    main(["--hidden", "16", "--precisions", "float32", "--batch", "8", "--reps", "2",
          "--obs-dim", "5", "--action-dim", "2", "--json", str(out)])  # fmt: skip
    (row,) = json.loads(out.read_text())["rows"]
    assert row["hidden"] == "16x16" and not row["compiled"]
    assert row["first_s"] > 0 and row["break_even"] == ""  # eager: nothing to repay
    assert row["update_ms"] > 0
