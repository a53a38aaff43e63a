"""Deterministic evaluation, and the progress it reports while its episodes run."""

import torch

from rlcore.config import PolicyConfig
from rlcore.envs import Pendulum
from rlcore.evaluate import run_episodes
from rlcore.policies import ActorCritic


def test_progress_is_paced_in_steps_while_episodes_run_side_by_side():
    """Pendulum's episodes all end at the 200-step limit: a count of finished episodes would
    stay 0 until the very end (a rate of 0 and no ETA); the steps run show the pace."""
    env = Pendulum(4)
    torch.manual_seed(0)
    policy = ActorCritic(env.obs_spec, env.action_space, PolicyConfig())
    calls: list[tuple[int, int]] = []
    episodes = run_episodes(policy, env, seed=0, progress=lambda *a: calls.append(a))
    assert calls[0] == (8, 0) and calls[1] == (16, 0)
    assert [steps for steps, _ in calls] == list(range(8, 201, 8))
    assert all(finished == 0 for _, finished in calls[:-1]) and calls[-1] == (200, 4)
    assert episodes.lengths.tolist() == [200] * 4
