"""Pendulum against Gymnasium's reference `Pendulum-v1`."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlcore.envs.base import StepSlot
from rlcore.envs.pendulum import Pendulum
from rlcore.observations import FLAT_KEY

N = 16


def flat(obs: TensorDict) -> torch.Tensor:
    """The `[N, obs_dim]` tensor of a flat env's observation (its one entry)."""
    return obs[FLAT_KEY]


def _actions(t: int) -> torch.Tensor:
    """A fixed, varied action sequence that also exceeds the torque bounds (clipping)."""
    phase = torch.arange(N, dtype=torch.float32)
    return (2.5 * torch.sin(0.1 * t + phase)).unsqueeze(1)


def test_matches_gymnasium_step_by_step() -> None:
    env = Pendulum(N)
    env.reset(seed=3)
    slot = StepSlot.allocate(N, env.obs_spec, env.device, with_success=False)
    refs = []
    for i in range(N):
        ref = gym.make("Pendulum-v1")
        ref.reset(seed=i)
        refs.append(ref)
    for t in range(100):
        # Sync Gymnasium (float64) to our float32 state before every step: pendulum motion
        # amplifies float32 rounding, so free-running trajectories drift apart by ~1e-3
        # within 100 steps even though each step agrees to float32 precision.
        state = env.state_dict()["physics.state"].double().numpy()
        for i, ref in enumerate(refs):
            ref.unwrapped.state = state[:, i].copy()
        action = _actions(t)
        env.step(action, slot)
        for i, ref in enumerate(refs):
            obs, reward, terminated, truncated, _ = ref.step(action[i].numpy())
            np.testing.assert_allclose(flat(slot.next_obs)[i].numpy(), obs, rtol=0, atol=1e-5)
            assert slot.reward[i].item() == pytest.approx(reward, rel=1e-6, abs=1e-5)
            assert not terminated and not truncated
        assert not slot.terminated.any()
        assert not slot.done.any()


def test_free_running_trajectory_starts_in_agreement() -> None:
    """Without re-syncing, the first steps still agree (no systematic drift)."""
    env = Pendulum(N)
    env.reset(seed=5)
    slot = StepSlot.allocate(N, env.obs_spec, env.device, with_success=False)
    state = env.state_dict()["physics.state"].double().numpy()
    refs = []
    for i in range(N):
        ref = gym.make("Pendulum-v1")
        ref.reset(seed=i)
        ref.unwrapped.state = state[:, i].copy()
        refs.append(ref)
    for t in range(10):
        action = _actions(t)
        env.step(action, slot)
        for i, ref in enumerate(refs):
            obs, reward, *_ = ref.step(action[i].numpy())
            np.testing.assert_allclose(flat(slot.next_obs)[i].numpy(), obs, rtol=0, atol=1e-5)
            assert slot.reward[i].item() == pytest.approx(reward, rel=1e-6, abs=1e-5)


def test_initial_state_distribution() -> None:
    env = Pendulum(10_000)
    obs = flat(env.reset(seed=0))
    theta = torch.atan2(obs[:, 1], obs[:, 0])
    assert obs[:, 2].abs().max() <= 1.0
    assert obs[:, 2].min() < -0.95 and obs[:, 2].max() > 0.95
    assert theta.min() < -3.0 and theta.max() > 3.0
    torch.testing.assert_close(obs[:, :2].norm(dim=1), torch.ones(10_000))


def test_truncates_after_200_steps_and_never_terminates() -> None:
    env = Pendulum(4)
    env.reset(seed=1)
    slot = StepSlot.allocate(4, env.obs_spec, env.device, with_success=False)
    for t in range(200):
        env.step(torch.full((4, 1), 2.0), slot)
        assert not slot.terminated.any()
        assert slot.truncated.all() == (t == 199)
    # Speed is clipped to 8 rad/s whatever the torque.
    assert flat(env.final_obs)[:, 2].abs().max() <= 8.0


def test_render_shape() -> None:
    env = Pendulum(4)
    env.reset(seed=0)
    frames = env.render(torch.tensor([0, 2]), size=32)
    assert frames.shape == (2, 32, 32, 3)
    assert frames.dtype == torch.uint8
    assert (frames == torch.tensor([204, 77, 77], dtype=torch.uint8)).all(-1).any()
