"""`benchmarks.sac_drift`: the reordered copy is the eager update, rounded otherwise."""

import torch

from benchmarks.sac_drift import REORDERED, Reordered, Transitions, build, drift, flat, real_drift


def test_the_reordered_copy_takes_the_eager_steps_and_a_plain_reorder_would_not():
    eager, reordered = build(4, 2, False, "tanh"), Reordered(build(4, 2, False, "tanh"))
    shuffled = build(4, 2, False, "tanh")  # rows reordered, draws not: another update
    data = Transitions(4, 2, batch=32, pool=200)
    order = torch.Generator().manual_seed(9)
    for _ in range(5):
        batch = data.sample()
        eager.update(batch)
        reordered.update(batch)
        shuffled.update(batch[torch.randperm(32, generator=order)])
    assert not torch.equal(flat(reordered.sac), flat(eager))  # rounded otherwise...
    torch.testing.assert_close(flat(reordered.sac), flat(eager), rtol=0, atol=2e-5)  # ...only
    assert (flat(shuffled) - flat(eager)).abs().max() > 1e-4


def test_rows_give_each_copy_its_distance_from_eager_at_each_checkpoint():
    rows = drift(12, 4, 2, "relu", copies=("eager", REORDERED))
    assert [(r["update"], r["copy"]) for r in rows] == [
        (step, copy) for step in (1, 10, 12) for copy in ("eager", REORDERED)
    ]
    assert all(r["distance"] == 0.0 for r in rows if r["copy"] == "eager")
    assert all(0.0 <= r["distance"] < 1e-4 for r in rows)
    assert all(r["activation"] == "relu" and 0 < r["alpha"] <= 1 for r in rows)


def test_on_a_real_runs_batches_the_copies_take_the_runs_own_steps():
    """The copies see what the training run samples, with its random draws: the reordered
    one stays at rounding's distance from the run's own SAC, with its temperature."""
    rows = real_drift("InvertedPendulum-v5", 12, copies=(REORDERED,))
    assert [(r["update"], r["copy"]) for r in rows] == [
        (step, copy) for step in (1, 10) for copy in ("eager", REORDERED)
    ]
    last = {r["copy"]: r for r in rows if r["update"] == 10}
    assert 0.0 < last[REORDERED]["distance"] < 1e-5
    assert abs(last[REORDERED]["alpha"] - last["eager"]["alpha"]) < 1e-6
