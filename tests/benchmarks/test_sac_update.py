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
