"""PushCube: reset distribution, pushing contact, success and the shaped reward."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from rlcore.envs.base import StepSlot
from rlcore.envs.push_cube import CONTACT_DIST, CUBE_LIMIT, PushCube
from rlcore.observations import FLAT_KEY


def flat(obs: TensorDict) -> torch.Tensor:
    """The `[N, obs_dim]` tensor of a flat env's observation (its one entry)."""
    return obs[FLAT_KEY]


def _place(
    env: PushCube,
    pusher: tuple[float, float],
    cube: tuple[float, float],
    goal: tuple[float, float],
) -> None:
    """Put every instance in one state (rows: pusher, pusher velocity, cube, goal)."""
    state = env.state_dict()
    row = torch.tensor([*pusher, 0.0, 0.0, *cube, *goal])
    state["physics.state"][:] = row.unsqueeze(1)
    env.load_state_dict(state)


def _slot(env: PushCube) -> StepSlot:
    return StepSlot.allocate(env.num_envs, env.obs_spec, env.device, with_success=True)


def test_reset_distribution() -> None:
    env = PushCube(50_000)
    obs = flat(env.reset(seed=0))
    pusher, cube, goal = obs[:, 0:2], obs[:, 4:6], obs[:, 6:8]
    goal_dist = (goal - cube).norm(dim=1)
    assert goal_dist.min() >= 0.2 - 1e-6 and goal_dist.max() <= 0.4 + 1e-6
    assert goal.abs().max() <= CUBE_LIMIT
    assert cube.abs().max() <= 0.3
    assert (cube - pusher).norm(dim=1).min() >= CONTACT_DIST - 1e-6
    assert pusher.abs().max() <= 0.5
    assert (obs[:, 2:4] == 0).all()
    # Goals cover every direction, including toward the table edge.
    angle = torch.atan2(*(goal - cube).T.flip(0))
    assert torch.histc(angle, bins=8, min=-math.pi, max=math.pi).min() > 2_000
    torch.testing.assert_close(obs[:, 8:10], cube - pusher)
    torch.testing.assert_close(obs[:, 10:12], goal - cube)


@pytest.mark.parametrize("control", ["velocity", "force"])
@pytest.mark.parametrize("degrees", [0.0, 30.0, -120.0])
def test_pushing_toward_the_cube_moves_it_that_way(control: str, degrees: float) -> None:
    env = PushCube(2, control=control)
    env.reset(seed=0)
    direction = torch.tensor([math.cos(math.radians(degrees)), math.sin(math.radians(degrees))])
    start = (-0.1 * direction).tolist()
    _place(env, pusher=start, cube=(0.0, 0.0), goal=(0.45, 0.45))
    slot = _slot(env)
    action = direction.expand(2, 2)
    for _ in range(10):
        env.step(action, slot)
    state = env.state_dict()["physics.state"]
    moved = state[4:6, 0]
    assert moved.norm() > 0.02
    # The cube moved along the pushing direction, with the pusher right behind it.
    assert torch.dot(moved / moved.norm(), direction) > 0.999
    assert (state[4:6, 0] - state[0:2, 0]).norm() == pytest.approx(CONTACT_DIST, abs=1e-5)


def test_no_contact_no_motion() -> None:
    env = PushCube(1)
    env.reset(seed=0)
    _place(env, pusher=(-0.2, 0.0), cube=(0.0, 0.0), goal=(0.3, 0.0))
    slot = _slot(env)
    env.step(torch.tensor([[0.0, 1.0]]), slot)
    state = env.state_dict()["physics.state"][:, 0]
    # Velocity control: 0.5 m/s for 0.05 s; the cube stays put.
    torch.testing.assert_close(state[0:2], torch.tensor([-0.2, 0.025]))
    torch.testing.assert_close(state[2:4], torch.tensor([0.0, 0.5]))
    torch.testing.assert_close(state[4:6], torch.tensor([0.0, 0.0]))


def test_pusher_cannot_tunnel_through_a_cube_at_the_table_edge() -> None:
    env = PushCube(1)
    env.reset(seed=0)
    _place(env, pusher=(0.3, 0.0), cube=(0.45, 0.0), goal=(0.0, 0.3))
    slot = _slot(env)
    for _ in range(20):
        env.step(torch.tensor([[1.0, 0.0]]), slot)
        state = env.state_dict()["physics.state"][:, 0]
        assert state[4] <= CUBE_LIMIT
        assert state[4] - state[0] >= CONTACT_DIST - 1e-5
    assert state[4].item() == pytest.approx(CUBE_LIMIT)
    # Blocked: the pusher no longer moves, and its velocity says so.
    torch.testing.assert_close(state[2:4], torch.zeros(2), atol=1e-4, rtol=0)


def test_reaching_the_goal_succeeds_and_terminates() -> None:
    env = PushCube(2)
    env.reset(seed=0)
    _place(env, pusher=(-0.05, 0.0), cube=(0.0, 0.0), goal=(0.1, 0.0))
    slot = _slot(env)
    push = torch.tensor([[1.0, 0.0], [0.0, 0.0]])  # instance 1 stays idle
    # The pusher advances 0.025 m a step and the cube stays 0.045 m ahead once touched:
    # cube x = 0.02, 0.045, 0.07, i.e. 0.08, 0.055, 0.03 m from the goal.
    for _ in range(2):
        env.step(push, slot)
        assert not slot.success.any() and not slot.done.any()
    env.step(push, slot)
    assert slot.success.tolist() == [True, False]
    assert slot.terminated.tolist() == [True, False]
    assert slot.done.tolist() == [True, False]
    final = flat(env.final_obs)[0]
    assert final[4].item() == pytest.approx(0.07, abs=1e-6)
    # Pusher sits exactly on the push point: reward = -(0 + 2 * 0.03) + 1
    assert slot.reward[0].item() == pytest.approx(0.94, abs=1e-5)
    # Auto-reset: the next observation starts a fresh episode with the goal 0.2-0.4 m away.
    next_obs = flat(slot.next_obs)
    goal_dist = (next_obs[0, 6:8] - next_obs[0, 4:6]).norm()
    assert 0.2 - 1e-6 <= goal_dist <= 0.4 + 1e-6
    assert env.elapsed_steps.tolist() == [0, 3]


def test_reward_by_hand() -> None:
    env = PushCube(1)
    env.reset(seed=0)
    _place(env, pusher=(0.07, -0.085), cube=(0.1, 0.0), goal=(0.1, 0.3))
    slot = _slot(env)
    env.step(torch.zeros(1, 2), slot)  # a zero velocity command: nothing moves
    # unit(goal - cube) = (0, 1), push_point = (0.1, 0.0) - (0, 1) * 0.045 = (0.1, -0.045)
    # |pusher - push_point| = |(-0.03, -0.04)| = 0.05;  |cube - goal| = 0.3
    # reward = -(0.05 + 2 * 0.3) = -0.65, no success
    assert slot.reward.item() == pytest.approx(-0.65, abs=1e-6)
    assert not slot.success.item() and not slot.terminated.item()


def test_truncates_after_100_steps() -> None:
    env = PushCube(3)
    env.reset(seed=0)
    slot = _slot(env)
    for t in range(100):
        env.step(torch.zeros(3, 2), slot)
        assert slot.truncated.all() == (t == 99)


def test_rejects_unknown_control() -> None:
    with pytest.raises(ValueError, match="control"):
        PushCube(1, control="torque")


def test_render_shape() -> None:
    env = PushCube(3)
    env.reset(seed=0)
    frames = env.render(size=48)
    assert frames.shape == (3, 48, 48, 3)
    assert frames.dtype == torch.uint8


def test_group_reset_gives_each_group_one_cube_and_goal():
    env = PushCube(12)
    env.reset(seed=3, group_size=4)
    cube, goal = env._cube.T, env._goal.T  # [N, 2] each
    for start in (0, 4, 8):
        members = slice(start, start + 4)
        assert torch.equal(cube[members], cube[start].expand(4, 2))
        assert torch.equal(goal[members], goal[start].expand(4, 2))
    assert not torch.equal(cube[0], cube[4]) and not torch.equal(goal[4], goal[8])

    # A partial group reset (what GRPO's collector does when one group finishes) redraws
    # only that group, again shared by its members.
    before = env._state.clone()
    env.reset(env_ids=torch.arange(4, 8), group_size=4)
    assert torch.equal(env._state[:, :4], before[:, :4])
    assert torch.equal(env._state[:, 8:], before[:, 8:])
    assert not torch.equal(env._state[4:8, 4], before[4:8, 4])
    assert torch.equal(env._state[4:8, 4:8], env._state[4:8, 4:5].expand(4, 4))
