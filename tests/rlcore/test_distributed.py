"""Data parallelism over two gloo processes on CPU: averaged gradients, ranks kept in
lockstep, rank-0-only checkpoints and resume (rlcore.distributed)."""

from __future__ import annotations

import pytest
import torch

from rlcore.checkpoint import CheckpointError, load_checkpoint
from rlcore.distributed import RANK_SEED_STRIDE, Distributed, DistributedError
from rlcore.trainer import Trainer
from tests.rlcore.distributed_workers import (
    collectives_worker,
    experiment,
    gradient_worker,
    mean_loss,
    rank_data,
    run_ranks,
    small_policy,
    training_worker,
    unsynchronised_worker,
)


def test_gradients_are_the_full_batch_gradient_on_every_rank(tmp_path):
    sizes = [6, 10]  # unequal minibatches: the average is weighted by samples
    ranks = run_ranks(gradient_worker, tmp_path, sizes)

    # Reference: one process, one backward over both ranks' samples together.
    policy = small_policy()
    (obs0, action0), (obs1, action1) = rank_data(0, sizes[0]), rank_data(1, sizes[1])
    obs, action = torch.cat([obs0, obs1]), torch.cat([action0, action1])
    loss, stats = mean_loss(policy, obs, action)
    loss.backward()
    for rank in ranks:
        for got, want in zip(rank["grads"], policy.parameters(), strict=True):
            torch.testing.assert_close(got, want.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(rank["stats"], stats, rtol=1e-5, atol=1e-6)
    # Identical on both ranks, bit for bit, before and after five more (clipped) steps.
    for a, b in zip(ranks[0]["grads"], ranks[1]["grads"], strict=True):
        assert torch.equal(a, b)
    moved = False
    for a, b, start in zip(
        ranks[0]["params"], ranks[1]["params"], small_policy().parameters(), strict=True
    ):
        assert torch.equal(a, b)
        moved |= not torch.equal(a, start.detach())
    assert moved


def test_collectives_pool_moments_and_agree_on_minibatch_counts(tmp_path):
    ranks = run_ranks(collectives_worker, tmp_path)
    everything = torch.cat([rank_data(r, 5 + 3 * r)[0] for r in (0, 1)]).double()
    for rank in ranks:
        count, mean, var = rank["moments"]
        assert count == 13
        torch.testing.assert_close(mean, everything.mean(0))
        torch.testing.assert_close(var, everything.var(0, unbiased=False))
        assert rank["count"] == 3  # rank 0 can fill only 3 minibatches: both take 3 steps
        assert rank["count_unmasked"] == 4
    assert [rank["seed"] for rank in ranks] == [7, 7 + RANK_SEED_STRIDE]


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_two_ranks_train_one_policy_and_resume_from_rank_zeros_checkpoint(tmp_path, algorithm):
    ranks = run_ranks(training_worker, tmp_path, algorithm)
    zero, one = ranks

    # Different data (own seeds), one policy: identical after every update, and trained.
    assert not torch.equal(zero["first_obs"], one["first_obs"])
    assert torch.equal(zero["start"], one["start"])
    assert torch.equal(zero["straight"], one["straight"])
    assert not torch.equal(zero["start"], zero["after_two"])
    # Env steps are summed over ranks: 6 iterations x 2 ranks x 8 envs x 16 steps.
    assert zero["env_steps"] == one["env_steps"] == 6 * 2 * 8 * 16
    assert zero["iterations"] == 6
    # Rank 0 alone evaluates and reports; rank 1 built no evaluation env.
    assert zero["has_eval_env"] and not one["has_eval_env"]
    assert len(zero["sink_calls"]) == 6 + 2 and one["sink_calls"] == []

    # Rank 0 alone wrote the checkpoint, holding both ranks' envs.
    assert (tmp_path / "written_by_rank0.pt").exists()
    assert not (tmp_path / "written_by_rank1.pt").exists()
    state = load_checkpoint(tmp_path / "written_by_rank0.pt")
    assert len(state["ranks"]) == 2 and state["note"] == "kept"

    # The resumed two-process run continued from it bit-identically, on both ranks.
    for rank in ranks:
        assert rank["iteration_after_load"] == 2 and rank["extra"] == {"note": "kept"}
        assert torch.equal(rank["resumed"], rank["straight"])
        for key, value in rank["straight_env"].items():
            assert torch.equal(rank["resumed_env"][key], value), key

    # One process cannot continue a two-process run: its envs are not there.
    with pytest.raises(CheckpointError, match="written by 2 process"):
        Trainer(experiment(algorithm)).load(tmp_path / "written_by_rank0.pt")


def test_a_rank_stepping_without_the_averaging_stops_the_run_on_every_rank(tmp_path):
    ranks = run_ranks(unsynchronised_worker, tmp_path)
    for rank in ranks:
        assert rank["error"] is not None
        assert "differ between ranks after iteration 1" in rank["error"]


def test_a_single_process_needs_no_process_group():
    single = Distributed()
    assert single.is_main and not single.enabled and single.seed(3) == 3
    stats = torch.tensor([1.0, 2.0])
    assert single.average_gradients([], 4.0, stats) is stats
    assert single.device("cuda:1") == "cuda:1"


def test_one_named_gpu_for_several_ranks_is_refused():
    with pytest.raises(DistributedError, match=r"set env\.device to 'cuda'"):
        Distributed(rank=1, world_size=2, local_rank=1).device("cuda:0")
    assert Distributed(rank=3, world_size=4, local_rank=1).device("cuda") == "cuda:1"
    assert Distributed(rank=1, world_size=2, local_rank=1).device("cpu") == "cpu"
