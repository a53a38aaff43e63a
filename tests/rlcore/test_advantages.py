import math

import pytest
import torch

from rlcore.advantages import compute_gae, discounted_returns, group_normalize


def run_gae(reward, value, final_value, terminated, truncated, gamma=0.5, lam=0.5):
    out = torch.full_like(torch.tensor(reward), float("nan"))
    compute_gae(
        torch.tensor(reward),
        torch.tensor(value),
        torch.tensor(final_value),
        torch.tensor(terminated),
        torch.tensor(truncated),
        gamma,
        lam,
        advantage_out=out,
    )
    return out


def test_gae_termination_truncation_and_mid_rollout_reset():
    # env 0: terminated at t=1 (episode restarts at t=2), truncated at t=3 with V(final)=10.
    # gamma = lambda = 0.5, so the trace decays by gamma*lambda = 0.25 per step.
    #   t=3: truncated -> next = final_value = 10: delta = 1 + 0.5*10 - 4 = 2; adv = 2
    #   t=2: next = V(s3) = 4: delta = 1 + 0.5*4 - 3 = 0;     adv = 0 + 0.25*2 = 0.5
    #   t=1: terminated -> next = 0: delta = 1 + 0 - 2 = -1;  adv = -1 (trace cut)
    #   t=0: next = V(s1) = 2: delta = 1 + 0.5*2 - 1 = 1;     adv = 1 + 0.25*(-1) = 0.75
    # env 1: no episode end, bootstrap from value[:, T] = 8.
    #   t=3: delta = 1 + 0.5*8 - 0 = 5; then 0.25*5 = 1.25, 0.3125, 0.078125
    adv = run_gae(
        reward=[[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]],
        value=[[1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 0.0, 0.0, 0.0, 8.0]],
        final_value=[[0.0, 0.0, 0.0, 10.0], [0.0, 0.0, 0.0, 0.0]],
        terminated=[[False, True, False, False], [False] * 4],
        truncated=[[False, False, False, True], [False] * 4],
    )
    expected = torch.tensor([[0.75, -1.0, 0.5, 2.0], [0.078125, 0.3125, 1.25, 5.0]])
    torch.testing.assert_close(adv, expected)


def test_terminated_and_truncated_together_is_not_bootstrapped():
    # The time limit falls on a terminal step: terminated wins, V(final) = 100 is ignored.
    #   t=1: delta = 1 + 0 - 0 = 1; t=0: delta = 0 + 0.5*0 - 0 = 0, adv = 0 + 0.25*1 = 0.25
    adv = run_gae(
        reward=[[0.0, 1.0]],
        value=[[0.0, 0.0, 7.0]],
        final_value=[[0.0, 100.0]],
        terminated=[[False, True]],
        truncated=[[False, True]],
    )
    torch.testing.assert_close(adv, torch.tensor([[0.25, 1.0]]))


def test_truncation_bootstraps_from_final_obs_value_not_next_value():
    # value[:, 1] is V(reset obs of the next episode) = 50 and must not leak in;
    # V(true final obs) = 4: delta = 0 + 1.0*4 - 1 = 3 with gamma = 1.
    adv = run_gae(
        reward=[[0.0, 0.0]],
        value=[[1.0, 50.0, 0.0]],
        final_value=[[4.0, 0.0]],
        terminated=[[False, False]],
        truncated=[[True, False]],
        gamma=1.0,
        lam=1.0,
    )
    assert adv[0, 0].item() == 3.0


def test_discounted_returns_cut_at_episode_ends():
    # gamma = 0.5. env 0 is done at t=1: G3 = 1, G2 = 1 + 0.5*1 = 1.5, G1 = 1 (cut),
    # G0 = 1 + 0.5*1 = 1.5. env 1 never ends and nothing is bootstrapped after t=3:
    # G3 = 2, G2 = 0 + 0.5*2 = 1, G1 = 0.5, G0 = 0.25.
    out = torch.full((2, 4), float("nan"))
    discounted_returns(
        torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 2.0]]),
        torch.tensor([[False, True, False, False], [False] * 4]),
        gamma=0.5,
        returns_out=out,
    )
    torch.testing.assert_close(out, torch.tensor([[1.5, 1.0, 1.5, 1.0], [0.25, 0.5, 1.0, 2.0]]))


def test_group_normalize_masks_lone_survivors_and_finished_groups():
    # Two groups of 3 envs (0-2 and 3-5), two steps; `returns` is [N, T].
    # group 0, t=0: all alive, G = 1, 2, 3: mean 2, unbiased std sqrt((1+0+1)/2) = 1
    #   -> A = -1, 0, 1
    # group 0, t=1: env 2 masked, G = 5, 7: mean 6, std sqrt((1+1)/1) = sqrt(2)
    #   -> A = -1/sqrt(2), 1/sqrt(2), 0 (masked)
    # group 1, t=0: only env 4 alive: a lone survivor has nothing to compare with -> 0
    # group 1, t=1: every member done (all masked) -> 0
    # mean std over the cells with >= 2 members: (1 + sqrt(2)) / 2
    returns = torch.tensor(
        [[1.0, 5.0], [2.0, 7.0], [3.0, 9.0], [4.0, 1.0], [4.0, 2.0], [10.0, 3.0]]
    )
    mask = torch.tensor(
        [[True, True], [True, True], [True, False], [False, False], [True, False], [False, False]]
    )
    # In place, as GRPO runs it: the advantages overwrite the returns.
    std = group_normalize(returns, mask, group_size=3, eps=1e-8, advantage_out=returns)
    r = 1 / math.sqrt(2)
    expected = torch.tensor([[-1.0, -r], [0.0, r], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    torch.testing.assert_close(returns, expected)
    assert float(std) == pytest.approx((1 + math.sqrt(2)) / 2)


def test_group_normalize_equal_returns_give_zero_advantage():
    returns = torch.full((4, 3), 7.0)
    out = torch.full_like(returns, float("nan"))
    std = group_normalize(returns, torch.ones(4, 3, dtype=torch.bool), 2, 1e-8, out)
    assert torch.equal(out, torch.zeros(4, 3)) and float(std) == 0.0
