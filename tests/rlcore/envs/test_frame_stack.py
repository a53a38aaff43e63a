"""FrameStack: camera images stacked over their last k frames, restarted at every episode."""

import dataclasses

import pytest
import torch

from rlcore.config import EnvConfig
from rlcore.envs import FrameStack, PushCubePixels, make_env
from rlcore.envs.base import StepSlot
from rlcore.envs.cartpole import CartPole
from rlcore.envs.gym_bridge import GymnasiumEnv
from rlcore.errors import ConfigError
from tests.rlcore.envs.flipbook import Flipbook, frame_ids
from tests.rlcore.envs.gym_test_envs import register

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
register()


def slot_for(env):
    return StepSlot.allocate(env.num_envs, env.obs_spec, env.device, env.has_success)


def act(env, slot, *actions):
    """Step with per-instance actions (below 0.8: Flipbook runs on; 1.0: it terminates)."""
    env.step(torch.tensor(actions, device=env.device)[:, None], slot)
    return frame_ids(slot.next_obs["image"])


@pytest.mark.parametrize("device", DEVICES)
def test_a_reset_repeats_the_first_frame_and_each_step_shifts_the_new_one_in(device):
    env = FrameStack(Flipbook(2, device=device), 4)
    obs = env.reset(seed=0)
    assert frame_ids(obs["image"]) == [[(1, 0)] * 4] * 2
    assert obs["step"].shape == (2, 1)  # vectors pass through unchanged
    slot = slot_for(env)
    act(env, slot, 0.0, 0.0)
    assert act(env, slot, 0.0, 0.0) == [[(1, 0), (1, 0), (1, 1), (1, 2)]] * 2
    assert torch.equal(slot.next_obs["step"].cpu(), torch.tensor([[2.0], [2.0]]))
    assert act(env, slot, 0.0, 0.0) == [[(1, 0), (1, 1), (1, 2), (1, 3)]] * 2
    assert act(env, slot, 0.0, 0.0) == [[(1, 1), (1, 2), (1, 3), (1, 4)]] * 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("host_check", [True, False], ids=["cpu-finals", "device-finals"])
def test_a_new_episode_starts_its_stack_alone_and_the_final_stack_is_the_old_ones(
    device, host_check
):
    """Instance 0 terminates at its 3rd step, instance 1 is truncated at its 6th: each
    next stack holds only the new episode's first frame, each final stack the ended
    episode's last frames and its true final one (final stacks written only at a `done`,
    or at every step, as on an accelerator)."""
    env = FrameStack(Flipbook(2, device=device), 3)
    env._host_check = host_check and device == "cpu"
    env.reset(seed=0)
    slot = slot_for(env)
    act(env, slot, 0.0, 0.0)
    act(env, slot, 0.0, 0.0)
    assert act(env, slot, 1.0, 0.0) == [[(2, 0)] * 3, [(1, 1), (1, 2), (1, 3)]]
    assert slot.terminated.tolist() == [True, False]
    assert frame_ids(env.final_obs["image"])[0] == [(1, 1), (1, 2), (1, 3)]
    assert act(env, slot, 0.0, 0.0) == [[(2, 0), (2, 0), (2, 1)], [(1, 2), (1, 3), (1, 4)]]
    act(env, slot, 0.0, 0.0)
    assert act(env, slot, 0.0, 0.0) == [[(2, 1), (2, 2), (2, 3)], [(2, 0)] * 3]
    assert slot.truncated.tolist() == [False, True]
    assert frame_ids(env.final_obs["image"])[1] == [(1, 4), (1, 5), (1, 6)]
    assert env.final_obs["step"][1].item() == 6.0  # the vector entry's final too
    assert act(env, slot, 0.0, 0.0)[1] == [(2, 0), (2, 0), (2, 1)]


def test_partial_and_group_resets_restart_only_the_chosen_stacks():
    env = FrameStack(Flipbook(4), 2)
    env.reset(seed=0)
    slot = slot_for(env)
    act(env, slot, 0.0, 0.0, 0.0, 0.0)
    obs = env.reset(env_ids=torch.tensor([1, 3]))
    assert frame_ids(obs["image"]) == [[(1, 0), (1, 1)], [(2, 0)] * 2] * 2
    assert act(env, slot, 0.0, 0.0, 0.0, 0.0)[:2] == [[(1, 1), (1, 2)], [(2, 0), (2, 1)]]
    fresh = FrameStack(Flipbook(4), 2)
    grouped = fresh.reset(seed=0, group_size=2)["image"].view(4, 2, 3, 2, 2)
    assert torch.equal(grouped[:, 0], grouped[:, 1])  # the first frame twice
    assert torch.equal(grouped[0], grouped[1]) and torch.equal(grouped[2], grouped[3])
    assert not torch.equal(grouped[0], grouped[2])  # each group its own start


@pytest.mark.parametrize("device", DEVICES)
def test_a_restored_env_continues_bit_identically(device):
    gen = torch.Generator().manual_seed(0)
    actions = [(torch.rand(3, 1, generator=gen) * 2 - 1).to(device) for _ in range(30)]

    def run(env, steps):
        slot, seen = slot_for(env), []
        for action in steps:
            env.step(action, slot)
            seen.append(slot.next_obs.clone())
        return seen

    env = FrameStack(Flipbook(3, device=device), 4)
    env.reset(seed=1)
    run(env, actions[:7])
    snapshot = env.state_dict()
    expected = run(env, actions[7:])
    twin = FrameStack(Flipbook(3, device=device), 4)
    twin.reset(seed=99)
    twin.load_state_dict({key: value.cpu() for key, value in snapshot.items()})
    for mine, theirs in zip(run(twin, actions[7:]), expected, strict=True):
        assert (mine == theirs).all()
    assert any(frame_ids(obs["image"])[0][0][0] > 1 for obs in expected)  # across episodes


def test_next_step_auto_reset_shifts_the_final_frame_in_and_restarts_after_it():
    """A Gymnasium next-step env: the `done` step's next observation is the final one (shifted
    in as any frame), and the following, invalid step restarts the stack from the new
    episode's first frame."""
    inner = GymnasiumEnv("rlcore-test/PixelPoint-v0", 4)  # terminates 1 step in 5
    env = FrameStack(inner, 3)
    assert env.has_invalid_steps and env.steps_on_host  # the inner env's traits
    obs = env.reset(seed=0)["image"].view(4, 3, 3, 16, 16)
    frames = [obs[:, 2].clone()]  # the inner env's newest frames, step by step
    slot = dataclasses.replace(slot_for(env), valid=torch.zeros(4, dtype=torch.bool))
    restart = torch.zeros(4, dtype=torch.bool)
    stacks = obs.clone()
    checked = 0
    for _ in range(40):
        env.step(torch.zeros(4, 2), slot)
        now = slot.next_obs["image"].view(4, 3, 3, 16, 16)
        frames.append(now[:, 2].clone())
        assert torch.equal(slot.valid, ~restart)  # the step after a done is invalid
        shifted = torch.cat([stacks[:, 1:], frames[-1][:, None]], 1)
        expected = torch.where(restart[:, None, None, None, None], frames[-1][:, None], shifted)
        assert torch.equal(now, expected)
        done = slot.done
        final = env.final_obs["image"].view(4, 3, 3, 16, 16)
        assert torch.equal(final[done], now[done])  # the final stack is the next obs
        checked += int(done.sum())
        stacks, restart = now.clone(), done.clone()
    assert checked >= 5
    env.close()


def test_the_stacked_spec_keeps_uint8_images_and_the_vector_entries():
    env = FrameStack(PushCubePixels(2, image_size=8), 4)
    spec = env.obs_spec
    assert list(spec) == ["image", "privileged", "proprio"]
    assert spec["image"].shape == (12, 8, 8) and spec["image"].dtype == torch.uint8
    assert spec["proprio"].shape == (4,) and spec["proprio"].dtype == torch.float32
    assert spec["privileged"].privileged and not spec["image"].privileged
    assert env.frame_stack == 4 and PushCubePixels.frame_stack == 1
    assert (env.max_episode_steps, env.has_success) == (100, True)
    env.set_max_episode_steps(7)  # read through to the inner env
    assert env.max_episode_steps == env.env.max_episode_steps == 7
    assert env.render(size=16).shape == (2, 16, 16, 3)


def test_an_env_without_images_is_refused_in_one_line_naming_the_key():
    with pytest.raises(ConfigError) as refused:
        make_env(EnvConfig("cartpole", num_envs=2, frame_stack=4))
    assert str(refused.value) == (
        "env.frame_stack: 4 stacks camera images, and env 'cartpole' has none (entries: "
        "state float32 [4]): remove env.frame_stack or set it to 1"
    )
    with pytest.raises(ConfigError, match="env 'CartPole' has none"):
        FrameStack(CartPole(2), 2)


def test_make_env_stacks_only_when_asked():
    options = {"image_size": 8}
    plain = make_env(EnvConfig("push_cube_pixels", num_envs=2, options=options))
    assert not isinstance(plain, FrameStack)
    stacked = make_env(EnvConfig("push_cube_pixels", num_envs=2, options=options, frame_stack=2))
    assert isinstance(stacked, FrameStack) and stacked.obs_spec["image"].shape == (6, 8, 8)
