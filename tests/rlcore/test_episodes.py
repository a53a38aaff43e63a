import torch

from rlcore.episodes import episode_segments


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
