import pytest
import torch

from rlcore.episodes import episode_segments, episode_totals


def step_by_step(reward: torch.Tensor, ends: torch.Tensor, carry: torch.Tensor):
    """The obvious reference: running sums, read and reset at every end ([T, N] inputs)."""
    running = carry.clone().double()
    found = []
    for t in range(reward.shape[0]):
        running[0] += reward[t].double()
        running[1] += 1
        for n in range(reward.shape[1]):
            if ends[t, n]:
                found.append((n, t, running[0, n].item(), int(running[1, n].item())))
                running[:, n] = 0
    return sorted(found), running.float()


def test_hand_computed_pieces_with_carry():
    reward = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]]).T
    ends = torch.tensor([[False, True, False, True], [True, False, False, True]]).T
    carry = torch.tensor([[0.5, 7.0], [3.0, 2.0]])
    seg = episode_segments(reward, ends, carry)
    # env 0: 0.5 + 1 + 2 over 3 + 2 steps, then 3 + 4 over 2; env 1: 7 + 10 over 2 + 1,
    # then 20 + 30 + 40 over 3.
    assert seg.env.tolist() == [0, 0, 1, 1]
    assert seg.step.tolist() == [1, 3, 0, 3]
    assert seg.returns.tolist() == [3.5, 7.0, 17.0, 90.0]
    assert seg.lengths.tolist() == [5, 2, 3, 3]
    assert seg.carry.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_carry_runs_on_when_an_env_never_ends():
    reward = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]).T
    ends = torch.tensor([[False, True, False], [False, False, False]]).T
    seg = episode_segments(reward, ends, torch.tensor([[4.0, 6.0], [1.0, 9.0]]))
    assert seg.returns.tolist() == [7.0]
    assert seg.lengths.tolist() == [3]
    assert seg.carry.tolist() == [[3.0, 9.0], [1.0, 12.0]]


def test_matches_running_sums_on_random_rollouts():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        n, t = 9, 17
        reward = torch.randn(t, n, generator=gen)
        ends = torch.rand(t, n, generator=gen) < 0.2
        carry = torch.stack([torch.randn(n, generator=gen), torch.randint(0, 50, (n,)).float()])
        seg = episode_segments(reward, ends, carry)
        expected, expected_carry = step_by_step(reward, ends, carry)
        assert seg.env.tolist() == [e[0] for e in expected]
        assert seg.step.tolist() == [e[1] for e in expected]
        assert seg.lengths.tolist() == [e[3] for e in expected]
        torch.testing.assert_close(seg.returns, torch.tensor([e[2] for e in expected]))
        torch.testing.assert_close(seg.carry, expected_carry)


def test_no_ends_at_all():
    seg = episode_segments(torch.ones(3, 2), torch.zeros(3, 2, dtype=torch.bool), torch.zeros(2, 2))
    assert seg.env.numel() == 0 and seg.returns.numel() == 0
    assert seg.carry.tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_invalid_steps_are_not_counted_in_lengths():
    # env 0 ends at step 1; step 2 is its (invalid) reset step; its next episode ends at 4
    reward = torch.tensor([[1.0], [1.0], [0.0], [1.0], [1.0], [1.0]])
    ends = torch.tensor([[False], [True], [False], [False], [True], [False]])
    valid = torch.tensor([[True], [True], [False], [True], [True], [False]])
    seg = episode_segments(reward, ends, torch.tensor([[0.0], [4.0]]), valid)
    assert seg.lengths.tolist() == [6, 2] and seg.returns.tolist() == [2.0, 2.0]
    assert seg.carry.tolist() == [[1.0], [0.0]]  # one reward, no valid step yet


def test_totals_by_hand_with_carry_and_counted_ends():
    # as in test_hand_computed_pieces_with_carry: pieces 3.5/5, 7/2 (env 0), 17/3, 90/3 (env 1)
    reward = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]]).T
    ends = torch.tensor([[False, True, False, True], [True, False, False, True]]).T
    carry = torch.tensor([[0.5, 7.0], [3.0, 2.0]])
    success = torch.tensor([[False, True, False, False], [True, True, True, True]]).T
    every = episode_totals(reward, ends, carry, success=success)
    assert every.sums.dtype == torch.float64
    assert every.sums.tolist() == [4.0, 3.5 + 7.0 + 17.0 + 90.0, 5 + 2 + 3 + 3, 3.0]
    assert every.carry.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    # the second end of env 0 and the first of env 1 are not counted, but still split
    counted = torch.tensor([[True, True, True, False], [False, True, True, True]]).T
    some = episode_totals(reward, ends, carry, counted=counted, success=success)
    assert some.sums.tolist() == [2.0, 3.5 + 90.0, 5 + 3, 2.0]
    assert some.carry.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    none = episode_totals(reward, ends, carry, counted=torch.zeros_like(ends))
    assert none.sums.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_totals_carry_runs_on_when_an_env_never_ends():
    reward = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]).T
    ends = torch.tensor([[False, True, False], [False, False, False]]).T
    totals = episode_totals(reward, ends, torch.tensor([[4.0, 6.0], [1.0, 9.0]]))
    assert totals.sums.tolist() == [1.0, 7.0, 3.0, 0.0]
    assert totals.carry.tolist() == [[3.0, 9.0], [1.0, 12.0]]


def test_totals_with_invalid_steps_count_only_valid_lengths():
    reward = torch.tensor([[1.0], [1.0], [0.0], [1.0], [1.0], [1.0]])
    ends = torch.tensor([[False], [True], [False], [False], [True], [False]])
    valid = torch.tensor([[True], [True], [False], [True], [True], [False]])
    totals = episode_totals(reward, ends, torch.tensor([[0.0], [4.0]]), valid)
    assert totals.sums.tolist() == [2.0, 4.0, 8.0, 0.0]
    assert totals.carry.tolist() == [[1.0], [0.0]]


def segment_sums(seg, counted, success):
    """[episodes, returns, lengths, successes] over the counted pieces, as
    `EpisodeStats.totals` sums a collector's per-episode lists."""
    kept = counted[seg.step, seg.env]
    succeeded = success[seg.step, seg.env][kept]
    returns, lengths = seg.returns[kept], seg.lengths[kept]
    parts = [returns.numel(), returns.double().sum(), lengths.double().sum(), succeeded.sum()]
    return torch.tensor([float(p) for p in parts], dtype=torch.float64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("with_valid", [False, True])
@pytest.mark.parametrize("with_counted", [False, True])
def test_totals_equal_the_sums_of_the_segments(seed, with_valid, with_counted):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(10):
        t, n = int(torch.randint(1, 40, (1,), generator=gen)), 12
        reward = torch.randn(t, n, generator=gen) * 5
        # env 0 never ends, env 1 ends once, env 2 at every step, the rest now and then
        ends = torch.rand(t, n, generator=gen) < torch.rand(1, generator=gen)
        ends[:, 0] = False
        ends[:, 1] = False
        ends[int(torch.randint(0, t, (1,), generator=gen)), 1] = True
        ends[:, 2] = True
        carry = torch.stack(
            [torch.randn(n, generator=gen) * 20, torch.randint(1, 200, (n,), generator=gen).float()]
        )
        valid = torch.rand(t, n, generator=gen) < 0.8 if with_valid else None
        counted = torch.rand(t, n, generator=gen) < 0.6 if with_counted else None
        success = torch.rand(t, n, generator=gen) < 0.5
        seg = episode_segments(reward, ends, carry, valid)
        totals = episode_totals(reward, ends, carry, valid, counted, success)
        every = torch.ones_like(ends) if counted is None else counted
        expected = segment_sums(seg, every, success)
        assert expected[0] >= (1 if counted is None else 0)
        torch.testing.assert_close(totals.sums, expected, rtol=1e-6, atol=1e-9)
        assert totals.sums[[0, 2, 3]].tolist() == expected[[0, 2, 3]].tolist()  # exact counts
        assert torch.equal(totals.carry, seg.carry)  # the very same float32 values
        assert totals.carry[:, 0].tolist() == [
            pytest.approx(carry[0, 0].item() + reward[:, 0].double().sum().item(), rel=1e-6),
            carry[1, 0].item() + (t if valid is None else valid[:, 0].sum().item()),
        ]
        assert totals.carry[:, 2].tolist() == [0.0, 0.0]  # ended at the last step
        without = episode_totals(reward, ends, carry, valid, counted)
        assert without.sums[3].item() == 0.0
        assert torch.equal(without.sums[:3], totals.sums[:3])
