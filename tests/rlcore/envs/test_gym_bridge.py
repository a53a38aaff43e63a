"""The Gymnasium bridge: auto-reset modes, exact truncation bootstrap, spaces, named
observation entries (images kept uint8, channel-first), bad input, and PPO learning
Gymnasium's CartPole-v1 through it (the contract suite: test_contract.py)."""

import ctypes.util
import dataclasses
import math
import weakref

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import AddRenderObservation
from tensordict import TensorDict

from rlcore.algos.ppo import PPO
from rlcore.algos.registry import default_config
from rlcore.collector import GroupEpisodes, SyncCollector
from rlcore.config import EnvConfig, ExperimentConfig, TrainerConfig
from rlcore.envs import StepSlot, make_env
from rlcore.envs.gym_bridge import GymnasiumBridgeError, GymnasiumEnv
from rlcore.observations import FLAT_KEY, ObsEntry, as_spec
from rlcore.policies import ActorCritic, PolicyConfig
from rlcore.presets import GRPO_PRESETS, PRESETS
from rlcore.rollout import (
    ACTION,
    FINAL_VALUE,
    MASK,
    OBS,
    SAMPLE_LOG_PROB,
    TRUNCATED,
    RolloutSpec,
    make_rollout,
    step_slots,
)
from rlcore.trainer import Trainer
from tests.rlcore.envs.gym_test_envs import AnySpace, Counter, FramesVectorEnv, Recorder, register

register()
COUNTER = "rlcore-test/Counter-v0"  # time limit 3: final obs [3], next episode starts at [0]
PIXEL_POINT = "rlcore-test/PixelPoint-v0"  # {"image": uint8 [16, 16, 3], "state": [2]}


def flat(obs: TensorDict) -> torch.Tensor:
    """The `[..., obs_dim]` tensor of a flat env's observation (its one entry)."""
    return obs[FLAT_KEY]


def counter_sync(mode: AutoresetMode, n: int) -> SyncVectorEnv:
    make = lambda: gymnasium.wrappers.TimeLimit(Counter(), 3)  # noqa: E731
    return SyncVectorEnv([make] * n, autoreset_mode=mode)


BRIDGES = {
    "built (next-step)": lambda n: GymnasiumEnv(COUNTER, n),
    "built, same-step": lambda n: GymnasiumEnv(COUNTER, n, autoreset="same-step"),
    "same-step": lambda n: GymnasiumEnv(
        vector_env=counter_sync(AutoresetMode.SAME_STEP, n), max_episode_steps=3
    ),
    "next-step, sync": lambda n: GymnasiumEnv(
        vector_env=counter_sync(AutoresetMode.NEXT_STEP, n), max_episode_steps=3
    ),
    "disabled, sync": lambda n: GymnasiumEnv(
        vector_env=counter_sync(AutoresetMode.DISABLED, n), max_episode_steps=3
    ),
    "next-step, numpy": lambda n: GymnasiumEnv(COUNTER, n, vectorization="vector_entry_point"),
}
INVALID_STEPS = {"built (next-step)", "next-step, sync", "next-step, numpy"}


def collect(env, num_steps=9):
    torch.manual_seed(0)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    rollout = make_rollout(RolloutSpec.for_env(env, num_steps, with_value=True))
    collector = SyncCollector(env, policy, rollout, torch.Generator().manual_seed(0))
    collector.reset(seed=0)
    return policy, rollout, collector, collector.collect()


@pytest.mark.parametrize("mode", list(BRIDGES), ids=str)
def test_truncation_bootstraps_from_the_final_observation_in_every_autoreset_mode(mode):
    env = BRIDGES[mode](2)
    assert env.has_invalid_steps == (mode in INVALID_STEPS)
    policy, ro, _, stats = collect(env)
    obs = flat(ro[OBS])[0, :, 0].tolist()
    with torch.no_grad():
        v_final, v_reset = policy.value(torch.tensor([[3.0], [0.0]])).tolist()
    assert not math.isclose(v_final, v_reset)  # so the test can tell them apart
    truncated = ro[TRUNCATED][0, :-1]
    if env.has_invalid_steps:
        # next-step without chosen resets: the obs after a done is the final one, the step
        # after it is the (invalid) reset step and never a transition
        assert obs == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
        assert ro[MASK][0, :-1].tolist() == [True, True, True, False] * 2 + [True]
    else:
        assert obs == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
        assert MASK not in ro
    assert truncated.nonzero().squeeze(1).tolist() == (
        [2, 6] if env.has_invalid_steps else [2, 5, 8]
    )
    final_values = ro[FINAL_VALUE][0, :-1][truncated]
    torch.testing.assert_close(final_values, torch.full_like(final_values, v_final))
    # every reported episode: 3 steps, return 3 (the invalid reset step counts for nothing)
    assert stats.lengths.tolist() == [3] * stats.lengths.numel() and stats.lengths.numel() >= 4
    assert stats.returns.tolist() == [3.0] * stats.returns.numel()
    env.close()


def test_the_step_after_each_done_is_invalid_in_a_reused_slot_across_rollouts_and_resets():
    env = BRIDGES["next-step, sync"](2)  # Counter, time limit 3: done every 3rd real step
    # one slot for every step, as evaluation steps (the bridge keeps the last `done` by
    # reference, so it must read it before writing the next one)
    slot = dataclasses.replace(
        StepSlot.allocate(2, as_spec(1), torch.device("cpu"), False),
        valid=torch.zeros(2, dtype=bool),
    )
    env.reset(seed=0)
    valid, done = [], []
    for _ in range(8):
        env.step(torch.zeros(2, dtype=torch.long), slot)
        valid.append(slot.valid.tolist())
        done.append(slot.done[0].item())
    assert done == [False, False, True, False, False, False, True, False]
    assert valid == [[True, True]] * 3 + [[False, False]] + [[True, True]] * 3 + [[False, False]]
    for _ in range(3):
        env.step(torch.zeros(2, dtype=torch.long), slot)
    assert slot.done.tolist() == [True, True]
    env.reset(env_ids=torch.tensor([1]))  # a fresh episode has no reset step pending
    env.step(torch.zeros(2, dtype=torch.long), slot)
    assert slot.valid.tolist() == [False, True]
    # in a rollout, the first step of the next collect continues from the last one's done
    _, ro, collector, _ = collect(BRIDGES["next-step, numpy"](2), num_steps=3)
    collector.collect()
    assert ro[MASK][0, :-1].tolist() == [False, True, True]
    assert flat(ro[OBS])[0, :].tolist() == [[3.0], [0.0], [1.0], [2.0]]


def test_ppo_never_learns_from_invalid_reset_steps():
    env = BRIDGES["next-step, numpy"](4)
    policy, ro, _, _ = collect(env, num_steps=16)
    invalid = ~ro[MASK][:, :-1]
    assert invalid.any()
    # poison exactly the invalid transitions: if any reached the loss, parameters go NaN
    ro[ACTION][:, :-1][invalid] = 0
    ro[SAMPLE_LOG_PROB][:, :-1][invalid] = float("nan")
    ppo = PPO(policy, dataclasses.replace(PRESETS["cartpole"].algo), 10, torch.Generator())
    metrics = ppo.update(ro)
    assert all(torch.isfinite(p).all() for p in policy.parameters())
    assert math.isfinite(metrics["loss/policy"])
    env.close()


def test_dict_observations_are_named_entries_in_the_space_key_order():
    env = GymnasiumEnv("rlcore-test/DictPoint-v0", 2)
    obs = env.reset(seed=3)
    raw = gymnasium.make("rlcore-test/DictPoint-v0")
    first, _ = raw.reset(seed=int(np.random.default_rng(3).integers(0, 2**31 - 1)))
    # Gymnasium sorts a plain dict's keys: position (a float [2, 1], stored as a vector [2]),
    # then velocity
    assert env.obs_spec == {
        "position": ObsEntry((2,), torch.float32),
        "velocity": ObsEntry((2,), torch.float32),
    }
    assert list(obs.keys()) == ["position", "velocity"]
    np.testing.assert_array_equal(obs["position"][0].numpy(), first["position"].reshape(-1))
    np.testing.assert_array_equal(obs["velocity"][0].numpy(), first["velocity"])
    env.close()


def chw(image: np.ndarray) -> torch.Tensor:
    """A Gymnasium [H, W, C] image as the bridge stores it: [C, H, W]."""
    return torch.from_numpy(np.ascontiguousarray(np.asarray(image).transpose(2, 0, 1)))


def flat_all(obs: TensorDict) -> torch.Tensor:
    """Every entry of `obs` [N], flattened per instance and concatenated (as float)."""
    return torch.cat([v.reshape(obs.batch_size[0], -1).float() for v in obs.values()], 1)


def assert_rows_are(obs: TensorDict, recorded: list[dict], rows: list[int]) -> None:
    """Rows `rows` of PixelPoint observations `obs` are the Gymnasium env's own `recorded`."""
    for i, own in zip(rows, recorded, strict=True):
        assert torch.equal(obs["image"][i], chw(own["image"])), i
        assert torch.equal(obs["state"][i], torch.from_numpy(own["state"])), i


def recorded_sync(env_id: str, mode: AutoresetMode, n: int) -> SyncVectorEnv:
    """A sync vector env whose instances keep what they return (`Recorder`)."""
    make = lambda: Recorder(gymnasium.make(env_id))  # noqa: E731
    return SyncVectorEnv([make] * n, autoreset_mode=mode)


def random_actions(env: GymnasiumEnv, gen: torch.Generator) -> torch.Tensor:
    """Actions for every instance, uniform over a Discrete space or over [-1, 1]."""
    if isinstance(env.action_space, gymnasium.spaces.Discrete):
        return torch.randint(0, int(env.action_space.n), (env.num_envs,), generator=gen)
    return torch.rand(env.num_envs, env.action_dim, generator=gen) * 2 - 1


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_an_image_and_a_vector_come_through_as_the_envs_own_observations(mode):
    """PixelPoint ({"image": uint8 [16, 16, 3], "state": [2]}, time limit 5, terminating at
    random): after reset, every step, a partial reset, and at every episode's end (its true
    final observation), the bridge holds what each Gymnasium instance returned, the image
    channel-first and still uint8."""
    n = 4
    vector = recorded_sync(PIXEL_POINT, mode, n)
    instances = vector.envs
    env = GymnasiumEnv(vector_env=vector, max_episode_steps=5)
    assert env.has_invalid_steps == (mode == AutoresetMode.NEXT_STEP)
    assert env.obs_spec == {
        "image": ObsEntry((3, 16, 16), torch.uint8),
        "state": ObsEntry((2,), torch.float32),
    }
    assert_rows_are(env.reset(seed=0), [e.last for e in instances], list(range(n)))
    rollout = make_rollout(RolloutSpec.for_env(env, 12, with_value=True))
    gen, ended = torch.Generator().manual_seed(0), torch.zeros(2, dtype=torch.long)
    for slot in step_slots(rollout, with_valid=env.has_invalid_steps):
        slot.action.copy_(random_actions(env, gen))
        env.step(slot.action, slot)
        assert_rows_are(slot.next_obs, [e.last for e in instances], list(range(n)))
        done = slot.done.nonzero().squeeze(1).tolist()
        assert_rows_are(env.final_obs, [instances[i].last_step for i in done], done)
        ended += torch.stack([slot.terminated.sum(), slot.truncated.sum()])
    assert (ended > 0).all(), ended  # episodes ended both ways
    assert rollout[OBS, "image"].dtype == torch.uint8
    before = env.reset(env_ids=torch.tensor([], dtype=torch.long))
    assert_rows_are(before, [e.last for e in instances], list(range(n)))
    after = env.reset(env_ids=torch.tensor([1]))
    assert_rows_are(after, [e.last for e in instances], list(range(n)))
    assert not torch.equal(before["image"][1], after["image"][1])
    assert torch.equal(before["image"][[0, 2, 3]], after["image"][[0, 2, 3]])
    env.close()


@pytest.mark.parametrize("env_id", [PIXEL_POINT, COUNTER], ids=["named entries", "flat"])
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_the_staging_path_off_the_cpu_writes_what_the_cpu_path_writes(mode, env_id):
    """Off the CPU the bridge stages every field and entry in host memory and copies them to
    the device (pinned, asynchronously, on CUDA); made to stage on CPU, what lands in the
    slots and in `final_obs` can be compared bit for bit with the CPU path's."""
    limit = gymnasium.spec(env_id).max_episode_steps
    cpu, staged = (
        GymnasiumEnv(
            vector_env=SyncVectorEnv([lambda: gymnasium.make(env_id)] * 4, autoreset_mode=mode),
            max_episode_steps=limit,
        )
        for _ in range(2)
    )
    staged._stage_on_host(pin=False)
    assert staged._staging is not None and staged._final_host is None
    assert torch.equal(flat_all(cpu.reset(seed=1)), flat_all(staged.reset(seed=1)))
    rollouts = [make_rollout(RolloutSpec.for_env(e, 10, with_value=True)) for e in (cpu, staged)]
    slots = [step_slots(r, with_valid=cpu.has_invalid_steps) for r in rollouts]
    gen, dones = torch.Generator().manual_seed(0), 0
    for a, b in zip(*slots, strict=True):
        action = random_actions(cpu, gen)
        cpu.step(action, a), staged.step(action, b)
        done = a.done
        dones += int(done.sum())
        assert torch.equal(flat_all(cpu.final_obs)[done], flat_all(staged.final_obs)[done])
    assert dones > 0
    assert (rollouts[0] == rollouts[1]).all()
    assert torch.equal(flat_all(cpu._current_obs()), flat_all(staged._current_obs()))
    ids = torch.tensor([0, 3])
    assert torch.equal(flat_all(cpu.reset(env_ids=ids)), flat_all(staged.reset(env_ids=ids)))
    cpu.close(), staged.close()


@pytest.mark.parametrize("autoreset", ["next-step", "same-step"])
def test_named_entries_are_written_on_a_device_that_is_not_the_cpu(autoreset):
    """The `meta` device stands in for CUDA (no data, but every transfer and dtype)."""
    env = GymnasiumEnv(PIXEL_POINT, 4, device="meta", autoreset=autoreset)
    obs = env.reset(seed=0)
    assert obs.device.type == "meta" and obs["image"].dtype == torch.uint8
    slot = StepSlot.allocate(4, env.obs_spec, torch.device("meta"), False)
    for _ in range(8):  # past a time limit: final observations are written too
        env.step(torch.zeros(4, 2), slot)
    assert env.final_obs["image"].shape == (4, 3, 16, 16)
    assert env.final_obs.device.type == "meta"
    assert env._current_obs()["state"].device.type == "meta"
    env.load_state_dict(env.state_dict())
    env.close()


@pytest.mark.parametrize("staged", [False, True], ids=["cpu", "staged"])
def test_final_observations_given_as_a_dict_of_per_key_arrays(staged):
    env = GymnasiumEnv(vector_env=FramesVectorEnv(2, max_episode_steps=3), max_episode_steps=3)
    if staged:
        env._stage_on_host(pin=False)  # the path off the CPU (see the test above)
    assert list(env.obs_spec) == ["frame", "count"]
    assert env.obs_spec["frame"] == ObsEntry((3, 8, 8), torch.uint8)
    obs = env.reset(seed=0)
    assert torch.equal(obs["frame"][1], chw(FramesVectorEnv.frame(1, 0)))
    slot = StepSlot.allocate(2, env.obs_spec, torch.device("cpu"), False)
    for t in [1, 2, 3, 1, 2, 3]:
        env.step(torch.zeros(2, dtype=torch.long), slot)
        assert slot.done.tolist() == [t == 3] * 2
        for i in range(2):
            assert torch.equal(slot.next_obs["frame"][i], chw(FramesVectorEnv.frame(i, t % 3)))
            assert slot.next_obs["count"][i].item() == t % 3
            if t == 3:  # the true final observation
                assert torch.equal(env.final_obs["frame"][i], chw(FramesVectorEnv.frame(i, 3)))
                assert env.final_obs["count"][i].item() == 3
    env.close()


def test_each_slot_gets_its_own_views_even_where_a_freed_slot_was():
    """The bridge keeps numpy views of a slot's entries by the slot's `id`, which Python
    reuses once the slot is freed: the views leave with their slot."""
    vector = recorded_sync(PIXEL_POINT, AutoresetMode.SAME_STEP, 2)
    env = GymnasiumEnv(vector_env=vector, max_episode_steps=5)
    env.reset(seed=0)
    ids: set[int] = set()
    reused = False
    for _ in range(64):  # until Python hands a freed slot's id out again (allocator luck)
        slot = StepSlot.allocate(2, env.obs_spec, torch.device("cpu"), False)
        reused = id(slot) in ids
        ids.add(id(slot))
        env.step(torch.zeros(2, 2), slot)
        assert_rows_are(slot.next_obs, [e.last for e in vector.envs], [0, 1])
        gone = weakref.ref(slot)
        del slot
        assert gone() is None  # the bridge keeps no stepped slot alive
        if reused:
            break
    assert reused
    env.close()


def test_add_render_observation_pixels_of_cartpole_come_through_channel_first(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # pygame draws offscreen, silently

    def wrapped() -> gymnasium.Env:
        cartpole = gymnasium.make("CartPole-v1", render_mode="rgb_array")
        return AddRenderObservation(cartpole, render_only=False)

    env = GymnasiumEnv(vector_env=SyncVectorEnv([wrapped] * 2), max_episode_steps=500)
    assert env.obs_spec == {
        "pixels": ObsEntry((3, 400, 600), torch.uint8),
        "state": ObsEntry((4,), torch.float32),
    }
    obs = env.reset(seed=1)
    raw = wrapped()
    first, _ = raw.reset(seed=int(np.random.default_rng(1).integers(0, 2**31 - 1, size=2)[0]))
    assert torch.equal(obs["pixels"][0], chw(first["pixels"]))
    assert torch.equal(obs["state"][0], torch.from_numpy(first["state"]))
    slot = StepSlot.allocate(2, env.obs_spec, torch.device("cpu"), False)
    env.step(torch.tensor([1, 0]), slot)
    stepped, *_ = raw.step(1)
    assert torch.equal(slot.next_obs["pixels"][0], chw(stepped["pixels"]))
    assert slot.next_obs["pixels"].float().std() > 0  # a cart and a pole were drawn
    env.close(), raw.close()


u8, f32 = np.uint8, np.float32
KINDS = {  # observation space: (entry, its Dict key, stored shape, dtype, Gymnasium -> stored)
    "HWC image": (
        spaces.Box(0, 255, (16, 12, 3), u8),
        [("image", None, (3, 16, 12), torch.uint8, lambda v: v.transpose(2, 0, 1))],
    ),
    "CHW image": (
        spaces.Box(0, 255, (3, 16, 12), u8),
        [("image", None, (3, 16, 12), torch.uint8, lambda v: v)],
    ),
    "4x4x4 image: read channel-first": (
        spaces.Box(0, 255, (4, 4, 4), u8),
        [("image", None, (4, 4, 4), torch.uint8, lambda v: v)],
    ),
    "float64 matrix": (
        spaces.Box(-1, 1, (2, 3), np.float64),
        [("state", None, (6,), torch.float32, lambda v: v.reshape(-1))],
    ),
    "uint8 vector": (
        spaces.Box(0, 255, (5,), u8),
        [("state", None, (5,), torch.float32, lambda v: v)],
    ),
    "Dict, in its own order": (
        spaces.Dict(
            {
                "ids": spaces.Box(0, 9, (3,), np.int64),
                "depth": spaces.Box(0, 255, (8, 8, 1), u8),
                "grid": spaces.Box(0, 1, (2, 2, 2), f32),
                "Scalar_" + "x" * 57: spaces.Box(0, 1, (), f32),  # 64 characters
            },
            sort_keys=False,
        ),
        [
            ("ids", "ids", (3,), torch.float32, lambda v: v),
            ("depth", "depth", (1, 8, 8), torch.uint8, lambda v: v.transpose(2, 0, 1)),
            ("grid", "grid", (8,), torch.float32, lambda v: v.reshape(-1)),
            ("Scalar_" + "x" * 57, "Scalar_" + "x" * 57, (1,), torch.float32, np.atleast_1d),
        ],
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_box_is_stored_by_its_kind(kind):
    """Images (uint8, rank 3) stay uint8, channel-first; everything else is a float32 vector."""
    space, entries = KINDS[kind]
    vector = SyncVectorEnv([lambda: Recorder(AnySpace(space))] * 2)
    env = GymnasiumEnv(vector_env=vector, max_episode_steps=5)
    assert list(env.obs_spec) == [name for name, *_ in entries]

    def check(obs: TensorDict) -> None:
        for name, key, shape, dtype, stored in entries:
            assert env.obs_spec[name] == ObsEntry(shape, dtype), name
            for i, instance in enumerate(vector.envs):
                own = instance.last if key is None else instance.last[key]
                expected = torch.from_numpy(np.ascontiguousarray(stored(own))).to(dtype)
                assert torch.equal(obs[name][i], expected), (name, i)

    check(env.reset(seed=0))
    slot = StepSlot.allocate(2, env.obs_spec, torch.device("cpu"), False)
    env.step(torch.zeros(2, dtype=torch.long), slot)
    check(slot.next_obs)
    env.close()


@pytest.mark.parametrize("key", ["front camera", "x" * 65, "", "depth/left", "caméra"], ids=repr)
def test_a_dict_key_that_cannot_name_an_entry_is_refused_in_one_line(key):
    space = spaces.Dict({"ok": spaces.Box(0, 1, (2,)), key: spaces.Box(0, 1, (2,))})
    with pytest.raises(GymnasiumBridgeError, match="cannot name an entry") as refused:
        GymnasiumEnv("rlcore-test/AnySpace-v0", 2, env_kwargs={"observation_space": space})
    assert repr(key) in str(refused.value) and "\n" not in str(refused.value)
    nested = spaces.Dict({"arm": spaces.Dict({"q": spaces.Box(0, 1, (2,))})})
    with pytest.raises(GymnasiumBridgeError, match=r"'arm' is Dict.*only Box entries"):
        GymnasiumEnv("rlcore-test/AnySpace-v0", 2, env_kwargs={"observation_space": nested})


@pytest.mark.parametrize("env_id", [PIXEL_POINT, "rlcore-test/DictPointPixels-v0"])
def test_ppo_trains_on_a_users_image_env_named_with_its_module(env_id):
    """As params.yaml names it (`gymnasium:<module>:<id>`): PixelPoint, and DictPoint with
    `AddRenderObservation`; the images get a CNN and reach the rollout as uint8 [3, 16, 16]."""
    cfg = ExperimentConfig(
        env=EnvConfig(f"gymnasium:tests.rlcore.envs.gym_test_envs:{env_id}", num_envs=4),
        algorithm="ppo",
        algo=default_config("ppo"),
        policy=PolicyConfig(hidden_sizes=(16,), image_features=16),
        trainer=TrainerConfig(total_env_steps=4 * 8 * 2, num_steps=8, eval_every_iters=0),
    )
    trainer = Trainer(cfg)
    image = next(key for key, entry in trainer.env.obs_spec.items() if entry.is_image)
    trainer.run(max_iters=2)
    assert trainer.iteration == 2
    frames = trainer.rollout[OBS, image]
    assert frames.dtype == torch.uint8 and frames.shape == (4, 9, 3, 16, 16)
    assert frames.float().std() > 0
    assert any(p.dim() == 4 for p in trainer.policy.parameters())  # a conv layer
    trainer.env.close(), trainer.eval_env.close()


def test_box_actions_are_rescaled_from_the_unit_box_when_asked():
    clip = GymnasiumEnv("Pendulum-v1", 2)
    rescale = GymnasiumEnv("Pendulum-v1", 2, actions="rescale")
    clip.reset(seed=0), rescale.reset(seed=0)
    a, b = (StepSlot.allocate(2, as_spec(3), torch.device("cpu"), False) for _ in range(2))
    clip.step(torch.tensor([[2.0], [-2.0]]), a)
    rescale.step(torch.tensor([[1.0], [-1.0]]), b)  # [-1, 1] -> the torque range [-2, 2]
    assert torch.equal(flat(a.next_obs), flat(b.next_obs)) and torch.equal(a.reward, b.reward)
    clip.close(), rescale.close()


def test_bad_input_names_the_env_and_the_space():
    with pytest.raises(GymnasiumBridgeError, match=r"gymnasium:NoSuchEnv-v0"):
        GymnasiumEnv("NoSuchEnv-v0", 2)
    with pytest.raises(ValueError, match=r"env\.name 'gymnasium:NoSuchEnv-v0': unknown"):
        EnvConfig("gymnasium:NoSuchEnv-v0")
    with pytest.raises(GymnasiumBridgeError, match=r"TupleObs-v0: unsupported observation .*Tuple"):
        GymnasiumEnv("rlcore-test/TupleObs-v0", 2)
    env = GymnasiumEnv("Pendulum-v1", 2)
    env.reset(seed=0)
    slot = StepSlot.allocate(2, as_spec(3), torch.device("cpu"), False)
    with pytest.raises(
        GymnasiumBridgeError, match=r"Pendulum-v1: actions must have shape \[2, 1\]"
    ):
        env.step(torch.zeros(2, 3), slot)
    env.close()
    numpy_env = GymnasiumEnv(COUNTER, 4, vectorization="vector_entry_point")
    with pytest.raises(GymnasiumBridgeError, match="cannot reset chosen instances"):
        numpy_env.reset(seed=0, group_size=2)
    numpy_env.close()


def test_ppo_solves_gymnasium_cartpole_through_the_bridge():
    base = PRESETS["cartpole"]
    cfg = dataclasses.replace(
        base,
        env=EnvConfig("gymnasium:CartPole-v1", num_envs=32,
                      options={"vectorization": "vector_entry_point"}),
        trainer=dataclasses.replace(base.trainer, total_env_steps=120_000),
    )  # fmt: skip
    trainer = Trainer(cfg)
    assert trainer.env.has_invalid_steps  # Gymnasium's numpy CartPole resets one step late
    result = trainer.run()
    assert result.reached_target, trainer.last_eval
    assert trainer.last_eval["eval/episode_return"] >= 475
    trainer.env.close(), trainer.eval_env.close()


@pytest.mark.parametrize(
    "env_id, options, make_actions",
    [
        ("CartPole-v1", {}, lambda g: torch.randint(0, 2, (4,), generator=g)),
        ("Pendulum-v1", {}, lambda g: torch.randn(4, 1, generator=g) * 3),  # beyond [-2, 2]
        ("Pendulum-v1", {"actions": "rescale"}, lambda g: torch.randn(4, 1, generator=g) * 2),
    ],
    ids=["discrete", "box clipped", "box rescaled"],
)
def test_the_rollouts_action_column_steps_like_any_other_action(env_id, options, make_actions):
    """The collector hands the bridge the rollout's own action column, which it reads
    through a numpy view (no torch call); any other tensor is checked and converted first.
    Same results, and the rollout keeps the action as sampled (clipping works on a copy)."""
    from_rollout, outside = (GymnasiumEnv(env_id, 4, **options) for _ in range(2))
    from_rollout.reset(seed=5), outside.reset(seed=5)
    rollout = make_rollout(RolloutSpec.for_env(from_rollout, 6, with_value=True))
    slots = step_slots(rollout, with_valid=from_rollout.has_invalid_steps)
    other = StepSlot.allocate(4, from_rollout.obs_spec, torch.device("cpu"), False)
    gen = torch.Generator().manual_seed(0)
    for slot in slots:
        action = make_actions(gen)
        slot.action.copy_(action)
        from_rollout.step(slot.action, slot)
        outside.step(action.clone(), other)
        assert torch.equal(flat(slot.next_obs), flat(other.next_obs))
        assert torch.equal(slot.reward, other.reward) and torch.equal(slot.done, other.done)
        assert torch.equal(slot.action, action)  # not clipped or rescaled in place
    from_rollout.close(), outside.close()


def test_grouped_episodes_get_a_same_step_env_unless_told_otherwise():
    cfg = EnvConfig("gymnasium:CartPole-v1", num_envs=4)
    assert make_env(cfg).has_invalid_steps  # Gymnasium's default: next-step
    assert not make_env(cfg, every_step_a_transition=True).has_invalid_steps  # GRPO needs same-step
    told = dataclasses.replace(cfg, options={"autoreset": "next-step"})
    env = make_env(told, every_step_a_transition=True)
    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(hidden_sizes=(8,)))
    rollout = make_rollout(RolloutSpec.for_env(env, 4, with_value=True, with_mask=True))
    with pytest.raises(ValueError, match="autoreset 'same-step'"):
        SyncCollector(env, policy, rollout, torch.Generator(), groups=GroupEpisodes(2))


def test_grpo_trains_on_a_gymnasium_sync_env_with_the_default_options():
    base = GRPO_PRESETS["cartpole"]
    cfg = dataclasses.replace(
        base,
        env=EnvConfig("gymnasium:CartPole-v1", num_envs=8),
        trainer=dataclasses.replace(base.trainer, total_env_steps=8 * base.trainer.num_steps * 2),
    )
    trainer = Trainer(cfg)
    assert not trainer.env.has_invalid_steps
    trainer.run(max_iters=2)
    assert trainer.iteration == 2
    trainer.env.close(), trainer.eval_env.close()


def test_autoreset_is_checked():
    with pytest.raises(ValueError, match="autoreset must be one of"):
        GymnasiumEnv("CartPole-v1", 2, autoreset="same_step")
    with pytest.raises(GymnasiumBridgeError, match="CartPole-v1: autoreset applies to"):
        GymnasiumEnv("CartPole-v1", 2, vectorization="vector_entry_point", autoreset="same-step")


def test_mujoco_warnings_while_building_become_one_python_warning(tmp_path, monkeypatch, capfd):
    """MuJoCo would print each instance's warning and log it in the working directory."""
    mujoco = pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)
    # MuJoCo 4 warns that Gymnasium's half_cheetah.xml uses a deprecated compiler attribute.
    with pytest.warns(RuntimeWarning, match=r"HalfCheetah-v5: MuJoCo: .*settotalmass.*3 times"):
        env = GymnasiumEnv("HalfCheetah-v5", 3)
    env.close()
    assert "settotalmass" not in capfd.readouterr().out
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert mujoco.get_mju_user_warning() is None  # MuJoCo's own handler is back


def test_gymnasium_mujoco_envs_render_offscreen_without_a_display(monkeypatch):
    pytest.importorskip("mujoco")
    if not (ctypes.util.find_library("EGL") or ctypes.util.find_library("OSMesa")):
        pytest.skip("neither EGL nor OSMesa on this machine")
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.warns(RuntimeWarning):  # the MuJoCo 4 deprecation above
        env = GymnasiumEnv("HalfCheetah-v5", 2)
    env.reset(seed=0)
    try:
        frames = env.render(torch.tensor([1]), size=32)
    finally:
        env.close()
    assert frames.shape == (1, 32, 32, 3) and frames.dtype == torch.uint8
    assert frames.float().std() > 0  # something was drawn


def test_video_frames_are_rendered_at_their_size_for_the_envs_asked_only(monkeypatch):
    """The video stage passes its frame size: MuJoCo renders at it (not 480 px, shrunk),
    without shadows or reflections (as the native envs), and only the live envs draw."""
    mujoco = pytest.importorskip("mujoco")
    if not (ctypes.util.find_library("EGL") or ctypes.util.find_library("OSMesa")):
        pytest.skip("neither EGL nor OSMesa on this machine")
    from rlcore.config import EnvConfig
    from rlcore.envs import make_env

    monkeypatch.delenv("DISPLAY", raising=False)
    env = make_env(EnvConfig("gymnasium:Hopper-v5", num_envs=3), render_size=40)
    env.reset(seed=0)
    try:
        every = env.render(size=40)
        rendered = []
        for instance in env.envs.envs:
            original = instance.render
            monkeypatch.setattr(instance, "render", lambda f=original: rendered.append(1) or f())
        second = env.render(torch.tensor([1]), size=40)
        renderers = [instance.unwrapped.mujoco_renderer for instance in env.envs.envs]
    finally:
        env.close()
    assert every.shape == (3, 40, 40, 3) and every.float().std() > 0
    assert torch.equal(second[0], every[1]) and len(rendered) == 1
    assert all((r.width, r.height) == (40, 40) for r in renderers)
    flags = renderers[0]._get_viewer("rgb_array").scn.flags
    assert flags[mujoco.mjtRndFlag.mjRND_SHADOW] == 0
    assert flags[mujoco.mjtRndFlag.mjRND_REFLECTION] == 0
    # Envs whose constructor takes no width/height are built as before.
    cartpole = make_env(EnvConfig("gymnasium:CartPole-v1", num_envs=2), render_size=40)
    cartpole.reset(seed=0)
    assert cartpole.render(size=40).shape == (2, 40, 40, 3)
    cartpole.close()


def test_a_users_env_is_named_gymnasiums_way_with_its_module(tmp_path, monkeypatch):
    """`gymnasium:<module>:<id>` imports the module (which registers the env), then makes it."""
    from rlcore.config import EnvConfig
    from rlcore.envs import make_env

    (tmp_path / "user_envs_for_test.py").write_text(
        "import gymnasium\n"
        "from gymnasium.envs.classic_control.cartpole import CartPoleEnv\n"
        "gymnasium.register('UserCartPole-v0', entry_point=CartPoleEnv, max_episode_steps=7)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    env = make_env(EnvConfig("gymnasium:user_envs_for_test:UserCartPole-v0", num_envs=2))
    assert env.max_episode_steps == 7 and env.obs_dim == 4
    env.close()
    with pytest.raises(ValueError, match="cannot import module 'no_such_user_module'"):
        EnvConfig("gymnasium:no_such_user_module:UserCartPole-v0")


def test_headless_rendering_of_pygame_envs_prints_no_sdl_error():
    """Set up as docs/guide.md tells a library user without a display (as the CLI does)."""
    import os
    import subprocess
    import sys

    script = (
        "import os\n"
        "from rlcore.envs.headless import headless_render_env\n"
        "os.environ.update(headless_render_env())\n"
        "from rlcore.envs.gym_bridge import GymnasiumEnv\n"
        "env = GymnasiumEnv('CartPole-v1', 2)\n"
        "env.reset(seed=0)\n"
        "print(tuple(env.render(size=16).shape))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "XDG_RUNTIME_DIR")}
    env = {k: v for k, v in env.items() if not k.startswith("SDL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(2, 16, 16, 3)"
    assert "XDG_RUNTIME_DIR" not in done.stdout + done.stderr


FROZEN_LAKE_PATH = [1, 1, 2, 2, 1, 2]  # down, down, right, right, down, right: to the goal, 15


@pytest.mark.parametrize("autoreset", ["next-step", "same-step"])
def test_a_discrete_observation_is_one_hot_final_observation_included(autoreset):
    """FrozenLake's position (Discrete(16)) comes through as a one-hot state of 16 floats,
    built with Gymnasium's FlattenObservation; the goal's final observation too."""
    env = GymnasiumEnv("FrozenLake-v1", 2, env_kwargs={"is_slippery": False}, autoreset=autoreset)
    assert env.obs_spec == {FLAT_KEY: ObsEntry((16,), torch.float32)}
    one_hot = torch.eye(16)
    assert torch.equal(flat(env.reset(seed=0)), one_hot[[0, 0]])
    slot = StepSlot.allocate(2, env.obs_spec, torch.device("cpu"), False)
    cells = [4, 8, 9, 10, 14, 15]
    for action, cell in zip(FROZEN_LAKE_PATH, cells, strict=True):
        env.step(torch.full((2,), action), slot)
        assert slot.done.tolist() == [cell == 15] * 2
        assert slot.reward.tolist() == [float(cell == 15)] * 2
        if cell != 15:
            assert torch.equal(flat(slot.next_obs), one_hot[[cell, cell]])
    # The goal: its final observation kept, and the next episode starts at cell 0.
    assert torch.equal(flat(env.final_obs), one_hot[[15, 15]])
    if autoreset == "same-step":
        assert torch.equal(flat(slot.next_obs), one_hot[[0, 0]])
    else:  # the reset comes a step late: that step is invalid
        env.step(torch.zeros(2, dtype=torch.long), slot)
        assert torch.equal(flat(slot.next_obs), one_hot[[0, 0]])
    env.close()


def test_a_tuple_of_discrete_observations_is_their_one_hots_side_by_side():
    env = GymnasiumEnv("Blackjack-v1", 3, max_episode_steps=10)
    assert env.obs_spec == {FLAT_KEY: ObsEntry((32 + 11 + 2,), torch.float32)}
    state = flat(env.reset(seed=0))
    parts = state.split([32, 11, 2], dim=1)
    assert all(torch.equal(part.sum(1), torch.ones(3)) for part in parts)  # one-hot each
    assert set(state.unique().tolist()) == {0.0, 1.0}
    env.close()


def test_ppo_solves_a_discrete_observation_env():
    """Non-slippery FrozenLake: a return of 1 (the goal, in 6 steps) in 10,240 env steps."""
    cfg = ExperimentConfig(
        env=EnvConfig(
            "gymnasium:FrozenLake-v1", num_envs=16, options={"env_kwargs": {"is_slippery": False}}
        ),
        policy=PolicyConfig(hidden_sizes=(32,)),
        algo=dataclasses.replace(
            default_config("ppo"), lr=3e-3, num_epochs=4, num_minibatches=2, ent_coef=0.01
        ),
        trainer=TrainerConfig(
            total_env_steps=10_240, num_steps=32, eval_every_iters=0, eval_episodes=8, seed=0
        ),
    )
    trainer = Trainer(cfg)
    trainer.run()
    assert trainer.last_eval["eval/episode_return"] == 1.0
    assert trainer.last_eval["eval/episode_length"] == len(FROZEN_LAKE_PATH)
    trainer.env.close(), trainer.eval_env.close()


def test_an_env_without_a_time_limit_names_the_option_that_gives_one():
    with pytest.raises(GymnasiumBridgeError, match=r"env\.options\.max_episode_steps"):
        GymnasiumEnv("Blackjack-v1", 2)
