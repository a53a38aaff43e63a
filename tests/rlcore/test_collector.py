import pytest
import torch

from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.envs import CartPole
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

STATE = (OBS, FLAT_KEY)  # a flat env's observations in the rollout


def make(num_envs=4, num_steps=64, max_steps=None):
    env = CartPole(num_envs)
    if max_steps is not None:
        env.max_episode_steps = max_steps
        env._time_limit.fill_(max_steps)
    torch.manual_seed(0)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    rollout = make_rollout(RolloutSpec.for_env(env, num_steps, with_value=True))
    collector = SyncCollector(env, policy, rollout, torch.Generator().manual_seed(1))
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


def test_final_value_is_value_of_true_final_obs_on_truncation_only():
    env, policy, ro, collector = make(num_envs=8, num_steps=30, max_steps=10)
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
