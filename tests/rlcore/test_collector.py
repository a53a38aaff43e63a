import pytest
import torch

import rlcore.collector
from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.envs import CartPole, PushCube
from rlcore.envs.gym_bridge import GymnasiumEnv
from rlcore.episodes import EpisodeStats
from rlcore.observations import FLAT_KEY, as_spec
from rlcore.policies import Actor, ActorCritic, PolicyConfig
from rlcore.rollout import (
    DONE,
    FINAL_VALUE,
    MASK,
    OBS,
    REWARD,
    TERMINATED,
    TRUNCATED,
    VALUE,
    RolloutSpec,
    make_rollout,
)
from tests.rlcore.envs.gym_test_envs import register

STATE = (OBS, FLAT_KEY)  # a flat env's observations in the rollout


def make(num_envs=4, num_steps=64, max_steps=None, host_checks=True):
    env = CartPole(num_envs)
    if max_steps is not None:
        env.max_episode_steps = max_steps
        env._time_limit.fill_(max_steps)
    torch.manual_seed(0)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    rollout = make_rollout(RolloutSpec.for_env(env, num_steps, with_value=True))
    collector = SyncCollector(
        env, policy, rollout, torch.Generator().manual_seed(1), host_checks=host_checks
    )
    collector.reset(seed=0)
    return env, policy, rollout, collector


def test_episode_stats_match_a_plain_loop_across_rollouts():
    _, _, ro, collector = make()
    running_ret, running_len = [0.0] * 4, [0] * 4
    for _ in range(3):
        stats = collector.collect()
        expected = []  # episodes env by env, each env's in order
        for t in range(64):
            for n in range(4):
                running_ret[n] += ro[REWARD][n, t].item()
                running_len[n] += 1
                if ro[DONE][n, t]:
                    expected.append((n, t, running_ret[n], running_len[n]))
                    running_ret[n], running_len[n] = 0.0, 0
        expected.sort()
        assert stats.returns.tolist() == pytest.approx([e[2] for e in expected])
        assert stats.lengths.tolist() == [e[3] for e in expected]
    # CartPole gives +1 per step, so return equals length
    assert stats.returns.tolist() == pytest.approx(stats.lengths.double().tolist())


def test_obs_continuity_and_bootstrap_value():
    _, policy, ro, collector = make(num_envs=2, num_steps=8)
    collector.collect()
    last_obs = ro[STATE][:, -1].clone()
    with torch.no_grad():
        torch.testing.assert_close(ro[VALUE][:, -1], policy.value(last_obs))
    collector.collect()
    torch.testing.assert_close(ro[STATE][:, 0], last_obs)


@pytest.mark.parametrize("host_checks", [True, False], ids=["host-checks", "sync-free"])
def test_final_value_is_value_of_true_final_obs_on_truncation_only(host_checks):
    env, policy, ro, collector = make(8, num_steps=30, max_steps=10, host_checks=host_checks)
    final_obs_at = {}
    original_step = env.step

    def spy(action, slot):
        original_step(action, slot)
        final_obs_at[len(final_obs_at)] = env.final_obs.clone()

    env.step = spy
    collector.collect()
    truncated = ro[TRUNCATED][:, :30] & ~ro[TERMINATED][:, :30]
    assert truncated.any(), "time limit of 10 must truncate within 30 steps"
    for t in range(30):
        with torch.no_grad():
            v = policy.value(final_obs_at[t])
        expected = torch.where(truncated[:, t], v, torch.zeros_like(v))
        torch.testing.assert_close(ro[FINAL_VALUE][:, t], expected)
        # after auto-reset, obs[t+1] of a truncated env is a fresh start, not the final obs
        for n in torch.nonzero(truncated[:, t]).flatten().tolist():
            assert ro[STATE][n, t + 1].abs().max() <= 0.05


def test_collect_runs_without_autograd():
    _, policy, _ro, collector = make(num_envs=2, num_steps=4)
    calls = []
    policy.register_forward_pre_hook(lambda *_: calls.append(torch.is_inference_mode_enabled()))
    policy.act = policy.act  # act is not forward; hook the MLP instead
    policy.actor.register_forward_pre_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    collector.collect()
    assert calls and not any(calls)


def test_mismatched_policy_action_dim_is_rejected():
    env = CartPole(2)
    import gymnasium.spaces as spaces

    policy = ActorCritic(4, spaces.Box(-1, 1, (3,)), PolicyConfig())
    spec = RolloutSpec(2, 4, as_spec(4), (), torch.int64, True, False, env.device)
    with pytest.raises(ValueError, match="action dim"):
        SyncCollector(env, policy, make_rollout(spec), torch.Generator())


def test_rollout_and_policy_must_agree_on_the_critic():
    env = CartPole(2)
    policy = ActorCritic(4, env.action_space, PolicyConfig())
    critic_free = make_rollout(RolloutSpec.for_env(env, 4, with_value=False))
    with pytest.raises(ValueError, match="exactly when the policy has a critic"):
        SyncCollector(env, policy, critic_free, torch.Generator())


def grouped(mode_restart=True, num_envs=8, group_size=4, num_steps=64, reset_every_rollout=True):
    env = CartPole(num_envs)
    torch.manual_seed(0)
    policy = Actor(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    rollout = make_rollout(RolloutSpec.for_env(env, num_steps, with_value=False, with_mask=True))
    groups = GroupEpisodes(group_size, mode_restart, reset_every_rollout)
    collector = SyncCollector(env, policy, rollout, torch.Generator().manual_seed(1), groups)
    collector.reset(seed=0)
    return env, rollout, collector


@pytest.mark.parametrize("reset_every_rollout", [True, False])
def test_restart_groups_masks_early_finishers_and_restarts_groups_together(reset_every_rollout):
    _, rollout, collector = grouped(reset_every_rollout=reset_every_rollout)
    restarts = 0
    since_start = [0] * 8  # steps since the member's group episode started
    for _ in range(3):
        stats = collector.collect()
        obs, done, mask = rollout[STATE], rollout[DONE], rollout[MASK]
        assert VALUE not in rollout
        if reset_every_rollout:
            # Every rollout starts from a group reset: members of a group share the start.
            for g in range(2):
                assert torch.equal(obs[4 * g : 4 * g + 4, 0], obs[4 * g, 0].expand(4, -1))
            since_start = [0] * 8
        # Replay the rule: a member is in the loss until its own done; once all members of
        # its group are done, the group restarts together from one shared state.
        # (members still waiting from the previous rollout are the ones masked at t = 0)
        waiting = ~mask[:, 0]
        expected_lengths = []
        for t in range(64):
            assert torch.equal(mask[:, t], ~waiting), t
            for n in range(8):
                since_start[n] += 1
                if done[n, t] and mask[n, t]:
                    expected_lengths.append((n, t, since_start[n]))
            waiting |= done[:, t]
            for g in range(2):
                members = slice(4 * g, 4 * g + 4)
                if waiting[members].all():
                    restarts += 1
                    waiting[members] = False
                    since_start[members] = [0] * 4
                    assert torch.equal(obs[members, t + 1], obs[4 * g, t + 1].expand(4, -1))
        # Episode statistics count group episodes only: one per done inside the mask, as
        # long as the steps since its group started (CartPole pays +1 per step).
        assert stats.returns.numel() == int((done[:, :-1] & mask[:, :-1]).sum())
        expected_lengths = [length for _, _, length in sorted(expected_lengths)]
        assert stats.lengths.tolist() == expected_lengths
        assert stats.returns.tolist() == [float(x) for x in expected_lengths]
    assert restarts >= 4  # untrained CartPole episodes last ~10-40 steps


def test_first_done_mode_keeps_only_each_envs_first_episode():
    _, rollout, collector = grouped(mode_restart=False)
    collector.collect()
    done, mask = rollout[DONE][:, :-1], rollout[MASK][:, :-1]
    # in the loss: every step up to and including the first done, nothing after it
    done_before = torch.cumsum(done.int(), dim=1) - done.int()
    assert torch.equal(mask, done_before == 0)
    assert done.any(1).all() and not mask.all()


def test_grouped_collection_needs_a_mask_and_dividing_groups():
    env = CartPole(6)
    policy = Actor(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    masked = make_rollout(RolloutSpec.for_env(env, 8, with_value=False, with_mask=True))
    plain = make_rollout(RolloutSpec.for_env(env, 8, with_value=False))
    gen = torch.Generator()
    with pytest.raises(ValueError, match="group_size must divide the number of envs \\(6\\)"):
        SyncCollector(env, policy, masked, gen, GroupEpisodes(4))
    with pytest.raises(ValueError, match="`mask` exactly when episodes are grouped"):
        SyncCollector(env, policy, plain, gen, GroupEpisodes(2))
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        GroupEpisodes(1)


def list_sums(stats: EpisodeStats) -> list[float]:
    """[episodes, sum of returns, sum of lengths, successes] from the per-episode lists."""
    successes = 0.0 if stats.successes is None else float(stats.successes.sum())
    returns = stats.returns.double().sum().item()
    return [float(stats.returns.numel()), returns, float(stats.lengths.sum()), successes]


def assert_totals_are_the_list_sums(stats: EpisodeStats) -> torch.Tensor:
    totals = stats.totals()
    assert totals.dtype == torch.float64 and totals.shape == (4,)
    expected = list_sums(stats)
    assert totals.tolist() == pytest.approx(expected, rel=1e-6)
    assert totals[[0, 2, 3]].tolist() == [expected[0], expected[2], expected[3]]  # exact
    return totals


def test_totals_are_the_sums_of_the_episode_lists():
    _, _, ro, collector = make(num_envs=6, num_steps=50, max_steps=30)
    for _ in range(4):
        stats = collector.collect()
        totals = assert_totals_are_the_list_sums(stats)
        assert totals.device == ro.device
        count = int(ro[DONE][:, :-1].sum())
        assert count > 0 and totals[0].item() == count  # CartPole: every done is reported
        assert totals[1].item() == totals[2].item()  # +1 per step: returns are lengths
        assert stats.successes is None and not stats.has_successes
        metrics = stats.metrics("train")
        assert metrics["train/episodes"] == count
        assert metrics["train/episode_length"] == pytest.approx(totals[2].item() / count)
        assert "train/success_rate" not in metrics


def test_totals_of_an_env_with_successes():
    env = PushCube(8)
    env.max_episode_steps = 20
    env._time_limit.fill_(20)
    torch.manual_seed(0)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    rollout = make_rollout(RolloutSpec.for_env(env, 30, with_value=True))
    collector = SyncCollector(env, policy, rollout, torch.Generator().manual_seed(1))
    collector.reset(seed=0)
    for _ in range(2):
        stats = collector.collect()
        assert stats.has_successes
        assert_totals_are_the_list_sums(stats)
        assert stats.totals()[0].item() >= 8  # every env reaches its time limit
        assert "train/success_rate" in stats.metrics("train")


def test_totals_skip_the_invalid_steps_of_an_env():
    register()
    # Gymnasium's next-step autoreset: a step after each done is invalid (no transition)
    env = GymnasiumEnv("rlcore-test/Counter-v0", 3)  # time limit 3, +1 per step
    assert env.has_invalid_steps
    torch.manual_seed(0)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    rollout = make_rollout(RolloutSpec.for_env(env, 10, with_value=True))
    collector = SyncCollector(env, policy, rollout, torch.Generator().manual_seed(0))
    collector.reset(seed=0)
    for _ in range(3):
        stats = collector.collect()
        totals = assert_totals_are_the_list_sums(stats)
        count = totals[0].item()
        assert count >= 6 and totals.tolist() == [count, 3 * count, 3 * count, 0.0]
        assert stats.lengths.tolist() == [3] * int(count)
    env.close()


@pytest.mark.parametrize("restart", [True, False])
def test_grouped_totals_are_the_sums_of_the_group_episodes(restart):
    _, rollout, collector = grouped(mode_restart=restart, reset_every_rollout=True)
    for _ in range(3):
        stats = collector.collect()
        totals = assert_totals_are_the_list_sums(stats)
        done, mask = rollout[DONE][:, :-1], rollout[MASK][:, :-1]
        assert totals[0].item() == int((done & mask).sum()) > 0
        # a group episode ends at its member's first done after the group's start
        assert totals[1].item() == totals[2].item() >= totals[0].item()


def test_a_training_iteration_never_lists_the_episodes(monkeypatch):
    calls = []
    split = rlcore.collector.episode_segments

    def counting(*args, **kwargs):
        calls.append(1)
        return split(*args, **kwargs)

    monkeypatch.setattr(rlcore.collector, "episode_segments", counting)
    _, _, _, collector = make(num_envs=4, num_steps=64)
    stats = None
    for _ in range(3):
        stats = collector.collect()
        stats.metrics("train", totals=stats.totals())
    assert stats is not None and calls == []
    count = stats.totals()[0].item()
    assert stats.returns.numel() == count > 0 and len(calls) == 1
    assert stats.lengths.numel() == count and len(calls) == 1  # computed once


def test_episode_lists_are_read_before_the_next_collect():
    _, _, ro, collector = make(num_envs=4, num_steps=64)
    kept = collector.collect().resolve()
    lengths = kept.lengths.clone()
    stale = collector.collect()
    later = collector.collect()
    assert torch.equal(kept.lengths, lengths)  # resolved: its own copy
    with pytest.raises(RuntimeError, match="refilled by a later collect"):
        _ = stale.returns
    assert stale.totals()[0].item() > 0  # the totals were taken with the rollout
    assert later.returns.numel() == int(ro[DONE][:, :-1].sum())
