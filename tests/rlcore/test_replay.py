import threading

import pytest
import torch
from tensordict import TensorDict

from rlcore.collector import SyncCollector
from rlcore.datasets import load_dataset, save_dataset
from rlcore.envs import PushCubePixels
from rlcore.envs.cartpole import CartPole
from rlcore.envs.pendulum import Pendulum
from rlcore.envs.push_cube import PushCube
from rlcore.observations import FLAT_KEY, ObsEntry, as_spec
from rlcore.policies import UniformRandomPolicy
from rlcore.replay import NEXT_OBS, ReplayBuffer
from rlcore.rollout import (
    ACTION,
    DONE,
    FINAL_OBS,
    MASK,
    OBS,
    REWARD,
    TERMINATED,
    TRUNCATED,
    RolloutSpec,
    make_rollout,
)
from rlcore.stream_replay import FINAL_INDEX, StreamReplayBuffer


def make_buffer(capacity, seed=0, obs_dim=2):
    gen = torch.Generator().manual_seed(seed)
    return ReplayBuffer(capacity, obs_dim, (1,), torch.float32, "cpu", gen)


def data_ptrs(td):
    """Every stored tensor's data pointer, observation entries included."""
    return {key: t.data_ptr() for key, t in td.items(include_nested=True, leaves_only=True)}


def transitions(ids, obs_dim=2):
    """Transitions whose every field encodes its id (so a torn one is visible)."""
    ids = torch.as_tensor(ids, dtype=torch.float32)
    return TensorDict(
        {
            OBS: {FLAT_KEY: ids[:, None].expand(-1, obs_dim).clone()},
            ACTION: ids[:, None].clone(),
            REWARD: ids.clone(),
            NEXT_OBS: {FLAT_KEY: (ids[:, None] + 0.5).expand(-1, obs_dim).clone()},
            TERMINATED: (ids % 2 == 0),
            TRUNCATED: (ids % 3 == 0),
        },
        batch_size=[len(ids)],
    )


def test_add_wraps_around_and_keeps_the_newest():
    buffer = make_buffer(5)
    buffer.add(transitions([0, 1, 2]))
    assert (buffer.cursor, len(buffer)) == (3, 3)
    buffer.add(transitions([3, 4, 5, 6]))  # 3, 4 fill the end; 5, 6 overwrite slots 0, 1
    assert (buffer.cursor, len(buffer)) == (2, 5)
    assert buffer.storage[REWARD].tolist() == [5, 6, 2, 3, 4]
    buffer.add(transitions(list(range(10, 17))))  # more than the capacity: the last 5
    assert sorted(buffer.storage[REWARD].tolist()) == [12, 13, 14, 15, 16]
    assert len(buffer) == 5


def test_sampling_draws_only_filled_slots_uniformly():
    buffer = make_buffer(10)
    buffer.add(transitions([7, 8, 9]))
    ids = torch.cat([buffer.sample(100)[REWARD].clone() for _ in range(100)])  # batch reused
    counts = torch.bincount(ids.long(), minlength=10)
    assert counts[:7].sum() == 0 and (counts[7:] > 3000).all()  # ~3,333 each of 10,000


def test_the_same_generator_state_draws_the_same_batches():
    a, b = make_buffer(50, seed=3), make_buffer(50, seed=3)
    for buffer in (a, b):
        buffer.add(transitions(list(range(40))))
    assert torch.equal(a.sample(16)[REWARD], b.sample(16)[REWARD])


def test_sampling_an_empty_buffer_is_an_error():
    with pytest.raises(ValueError, match="empty replay buffer"):
        make_buffer(4).sample(2)


def tiny_rollout():
    """N=2 envs, T=3 steps; env 0 is truncated at t=1, env 1 terminates at t=2."""
    spec = RolloutSpec(
        2, 3, as_spec(1), (1,), torch.float32, False, False, torch.device("cpu"),
        with_final_obs=True,
    )  # fmt: skip
    rollout = make_rollout(spec)
    obs, final_obs = rollout[OBS, FLAT_KEY], rollout[FINAL_OBS, FLAT_KEY]
    # obs[n, t] = 10 n + t; after a done, obs[:, t + 1] is the next episode's first (100+).
    obs[:] = torch.tensor([[0.0, 1.0, 100.0, 101.0], [10.0, 11.0, 12.0, 110.0]])[..., None]
    rollout[ACTION][:] = torch.arange(8.0).view(2, 4, 1)
    rollout[REWARD][:] = torch.arange(8.0).view(2, 4) / 10
    rollout[TRUNCATED][0, 1] = True
    rollout[TERMINATED][1, 2] = True
    rollout[DONE][:] = rollout[TRUNCATED] | rollout[TERMINATED]
    final_obs[0, 1] = torch.tensor([2.0])  # the truncated episode's true last obs
    final_obs[1, 2] = torch.tensor([13.0])
    return rollout


def test_add_rollout_stores_true_final_observations_time_step_by_time_step():
    buffer = ReplayBuffer(10, 1, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add_rollout(tiny_rollout())
    stored = buffer.storage[: len(buffer)]
    assert len(buffer) == 6
    # Order: t=0 (env 0, env 1), t=1 (...), t=2 (...).
    assert stored[OBS, FLAT_KEY].squeeze(-1).tolist() == [0, 10, 1, 11, 100, 12]
    # next_obs: obs[:, t+1], except the final observations at the two done transitions.
    assert stored[NEXT_OBS, FLAT_KEY].squeeze(-1).tolist() == [1, 11, 2, 12, 101, 13]
    assert stored[TRUNCATED].tolist() == [False, False, True, False, False, False]
    assert stored[TERMINATED].tolist() == [False, False, False, False, False, True]
    assert stored[ACTION].squeeze(-1).tolist() == [0, 4, 1, 5, 2, 6]


def test_add_rollout_skips_invalid_steps():
    rollout = tiny_rollout()
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[0, 2] = False  # env 0's step after its end was a reset, not a transition
    rollout.set(MASK, mask)
    buffer = ReplayBuffer(10, 1, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add_rollout(rollout)
    assert buffer.storage[OBS, FLAT_KEY][: len(buffer)].squeeze(-1).tolist() == [0, 10, 1, 11, 12]


def test_state_round_trip_is_exact_and_sampling_continues_identically():
    buffer = make_buffer(8, seed=1)
    buffer.add(transitions(list(range(11))))  # wrapped once
    state = buffer.state_dict()
    restored = make_buffer(8, seed=99)
    restored.load_state_dict(state)
    restored.generator.set_state(buffer.generator.get_state())
    assert (restored.cursor, len(restored)) == (buffer.cursor, len(buffer))
    assert (restored.storage == buffer.storage).all()
    assert torch.equal(restored.sample(32)[OBS, FLAT_KEY], buffer.sample(32)[OBS, FLAT_KEY])
    with pytest.raises(ValueError, match="capacity 8 does not fit a buffer of capacity 4"):
        make_buffer(4).load_state_dict(state)


def test_concurrent_add_and_sample_never_tear_a_transition():
    buffer = make_buffer(64, obs_dim=8)
    buffer.add(transitions(list(range(64)), obs_dim=8))
    stop, torn = threading.Event(), []

    def sampler():
        while not stop.is_set():
            batch = buffer.sample(32)
            ids = batch[REWARD]
            rows = torch.cat(
                [batch[OBS, FLAT_KEY], batch[ACTION], batch[NEXT_OBS, FLAT_KEY] - 0.5], dim=1
            )  # every column equals the id in an intact transition
            if not torch.equal(rows, ids[:, None].expand_as(rows)):
                torn.append(batch.clone())

    thread = threading.Thread(target=sampler)
    thread.start()
    try:
        for start in range(64, 64 * 200, 16):
            buffer.add(transitions(list(range(start, start + 16)), obs_dim=8))
    finally:
        stop.set()
        thread.join()
    assert not torn


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity must be a positive integer, got 0"):
        make_buffer(0)


@pytest.mark.parametrize(
    ("env_cls", "action_shape", "action_dtype", "keys"),
    [
        (CartPole, (), torch.int64, 6),  # Discrete(2): one int64 per transition
        (Pendulum, (1,), torch.float32, 6),
        (PushCube, (2,), torch.float32, 7),  # reports success: one more column
    ],
)
def test_for_env_shapes_the_storage_like_the_env(env_cls, action_shape, action_dtype, keys):
    env = env_cls(num_envs=2)
    buffer = ReplayBuffer.for_env(env, 16, torch.Generator())
    assert buffer.storage[ACTION].shape == (16, *action_shape)
    assert buffer.storage[ACTION].dtype == action_dtype
    obs, next_obs = buffer.storage[OBS, FLAT_KEY], buffer.storage[NEXT_OBS, FLAT_KEY]
    assert obs.shape == next_obs.shape == (16, env.obs_dim)
    assert len(buffer.storage.keys()) == keys and len(buffer) == 0


def test_add_rollout_wraps_around_the_end():
    buffer = ReplayBuffer(4, 1, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add_rollout(tiny_rollout())  # 6 transitions into 4 slots: the last 4 are kept
    # The last 4 of the time-major order [0, 10, 1, 11, 100, 12] land in slots 0..3.
    assert buffer.storage[OBS, FLAT_KEY].squeeze(-1).tolist() == [1, 11, 100, 12]
    assert (buffer.cursor, len(buffer)) == (0, 4)
    buffer.add(transitions([50], obs_dim=1))  # cursor 0 -> 1
    buffer.add_rollout(tiny_rollout())
    # Again only the last 4 (obs 1, 11, 100, 12) survive, written from the cursor (slots
    # 1, 2, 3) and wrapping to slot 0, over the 50 added just before.
    assert buffer.storage[OBS, FLAT_KEY].squeeze(-1).tolist() == [12, 1, 11, 100]
    assert buffer.storage[NEXT_OBS, FLAT_KEY].squeeze(-1).tolist() == [13, 2, 12, 101]
    assert (buffer.cursor, len(buffer)) == (1, 4)


def test_add_rollout_splits_a_write_that_crosses_the_end():
    buffer = ReplayBuffer(8, 1, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add(transitions([50, 51, 52, 53, 54], obs_dim=1))  # cursor 5
    buffer.add_rollout(tiny_rollout())  # 3 rows at 5..7, 3 rows at 0..2
    assert buffer.storage[OBS, FLAT_KEY].squeeze(-1).tolist() == [11, 100, 12, 53, 54, 0, 10, 1]
    next_obs = buffer.storage[NEXT_OBS, FLAT_KEY].squeeze(-1)
    assert next_obs.tolist() == [12, 101, 13, 53.5, 54.5, 1, 11, 2]
    assert (buffer.cursor, len(buffer)) == (3, 8)


def test_sample_writes_into_a_view_of_a_larger_batch_in_place():
    buffer = make_buffer(10)
    buffer.add(transitions([4, 4, 4]))  # every slot holds id 4
    big = buffer.empty_batch(6)
    big[REWARD].fill_(-1)
    pointer = big[REWARD].data_ptr()
    buffer.sample(4, out=big[2:])
    assert big[REWARD].tolist() == [-1, -1, 4, 4, 4, 4]
    assert big[REWARD].data_ptr() == pointer
    with pytest.raises(ValueError, match=r"out has batch size \[6\], not \[4\]"):
        buffer.sample(4, out=big)


def test_sample_reuses_its_batch_for_each_size():
    buffer = make_buffer(10)
    buffer.add(transitions([1, 2, 3]))
    first = buffer.sample(8)
    pointers = data_ptrs(first)
    second = buffer.sample(8)
    assert second is first and data_ptrs(second) == pointers
    assert buffer.sample(4) is not first


def test_a_state_of_another_shape_is_refused_before_anything_is_written():
    state = make_buffer(8, obs_dim=3).state_dict()
    target = make_buffer(8, obs_dim=2)
    target.add(transitions([7]))
    with pytest.raises(ValueError, match=r"obs/state is torch.float32 \[0, 3\], the buffer needs"):
        target.load_state_dict(state)
    assert (target.cursor, len(target)) == (1, 1) and target.storage[REWARD][0] == 7


def test_load_keeps_the_storage_identity():
    source = make_buffer(8, seed=1)
    source.add(transitions([1, 2, 3]))
    target = make_buffer(8)
    pointers = data_ptrs(target.storage)
    target.load_state_dict(source.state_dict())
    assert data_ptrs(target.storage) == pointers
    assert target.storage[REWARD][:3].tolist() == [1, 2, 3]


# Named observation entries: a camera frame (uint8, stored as uint8) beside a state vector.
IMAGE_SPEC = {
    "image": ObsEntry((3, 8, 8), torch.uint8),
    "state": ObsEntry((4,), torch.float32),
}


def structured_buffer(capacity, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return ReplayBuffer(capacity, IMAGE_SPEC, (1,), torch.float32, "cpu", gen)


def structured_transitions(ids):
    """Transitions whose every entry encodes its id: the image every pixel (uint8), the state
    every component, next_obs id + 1 (the image) and id + 0.5 (the state)."""
    ids = torch.as_tensor(ids, dtype=torch.float32)
    pixels = ids.to(torch.uint8)[:, None, None, None].expand(-1, 3, 8, 8)
    return TensorDict(
        {
            OBS: {"image": pixels.clone(), "state": ids[:, None].expand(-1, 4).clone()},
            ACTION: ids[:, None].clone(),
            REWARD: ids.clone(),
            NEXT_OBS: {"image": pixels + 1, "state": (ids[:, None] + 0.5).expand(-1, 4).clone()},
            TERMINATED: (ids % 2 == 0),
            TRUNCATED: (ids % 3 == 0),
        },
        batch_size=[len(ids)],
    )


def test_a_structured_buffer_stores_each_entry_in_its_own_dtype():
    buffer = structured_buffer(6)
    for key in (OBS, NEXT_OBS):
        assert buffer.storage[key, "image"].dtype == torch.uint8
        assert buffer.storage[key, "image"].shape == (6, 3, 8, 8)
        assert buffer.storage[key, "state"].dtype == torch.float32
        assert buffer.storage[key, "state"].shape == (6, 4)
    assert buffer.nominal_bytes == 6 * (2 * (3 * 8 * 8 + 4 * 4) + 4 + 4 + 1 + 1)
    buffer.add(structured_transitions([250, 251, 252, 253]))
    buffer.add(structured_transitions([254, 7, 8, 9]))  # wraps: 8, 9 overwrite slots 0, 1
    assert buffer.storage[REWARD].tolist() == [8, 9, 252, 253, 254, 7]
    image = buffer.storage[OBS, "image"]
    assert image.dtype == torch.uint8
    assert image.flatten(1).tolist() == [[v] * 192 for v in [8, 9, 252, 253, 254, 7]]
    assert buffer.storage[NEXT_OBS, "image"][3, 0, 0, 0] == 254  # uint8 253 + 1, no float
    batch = buffer.sample(64)
    assert batch[OBS, "image"].dtype == batch[NEXT_OBS, "image"].dtype == torch.uint8
    ids = batch[REWARD]
    # Every entry of a sampled transition comes from that one transition.
    assert torch.equal(batch[OBS, "image"].float(), ids.view(-1, 1, 1, 1).expand(-1, 3, 8, 8))
    assert torch.equal(
        batch[NEXT_OBS, "image"].float(), (ids + 1).view(-1, 1, 1, 1).expand(-1, 3, 8, 8)
    )
    assert torch.equal(batch[OBS, "state"], ids[:, None].expand(-1, 4))
    assert torch.equal(batch[NEXT_OBS, "state"], (ids[:, None] + 0.5).expand(-1, 4))


def structured_rollout(seed=0):
    """N=2 envs, T=3 steps of both entries, random everywhere; env 0 is truncated at t=1,
    env 1 terminates at t=2. `final_obs` is filled everywhere, so a stale value read where
    the transition is not done would show."""
    spec = RolloutSpec(
        2, 3, IMAGE_SPEC, (1,), torch.float32, False, False, torch.device("cpu"),
        with_final_obs=True,
    )  # fmt: skip
    rollout = make_rollout(spec)
    gen = torch.Generator().manual_seed(seed)
    for key in (OBS, FINAL_OBS):
        rollout[key, "image"][:] = torch.randint(0, 256, (2, 4, 3, 8, 8), generator=gen).to(
            torch.uint8
        )
        rollout[key, "state"][:] = torch.randn(2, 4, 4, generator=gen)
    rollout[ACTION][:] = torch.arange(8.0).view(2, 4, 1)
    rollout[REWARD][:] = torch.arange(8.0).view(2, 4) / 10
    rollout[TRUNCATED][0, 1] = True
    rollout[TERMINATED][1, 2] = True
    rollout[DONE][:] = rollout[TRUNCATED] | rollout[TERMINATED]
    return rollout


DONE_AT = {(0, 1), (1, 2)}  # (env, t) of the structured rollout's done transitions


def true_next(rollout, key, n, t):
    """What the buffer must store as next_obs of (env n, step t) for entry `key`."""
    return rollout[FINAL_OBS, key][n, t] if (n, t) in DONE_AT else rollout[OBS, key][n, t + 1]


def test_add_rollout_stores_true_final_observations_for_every_entry():
    rollout = structured_rollout()
    buffer = structured_buffer(10)
    buffer.add_rollout(rollout)
    assert len(buffer) == 6
    stored = buffer.storage[:6]
    order = [(n, t) for t in range(3) for n in range(2)]  # time-major: t=0 (env 0, env 1), ...
    assert stored[ACTION].squeeze(-1).tolist() == [0, 4, 1, 5, 2, 6]
    for key in ("image", "state"):
        assert stored[OBS, key].dtype == stored[NEXT_OBS, key].dtype == IMAGE_SPEC[key].dtype
        for row, (n, t) in enumerate(order):
            assert torch.equal(stored[OBS, key][row], rollout[OBS, key][n, t])
            assert torch.equal(stored[NEXT_OBS, key][row], true_next(rollout, key, n, t))
    # The two done transitions' next_obs differ from what the env showed at t + 1.
    assert not torch.equal(stored[NEXT_OBS, "image"][2], rollout[OBS, "image"][0, 2])
    assert not torch.equal(stored[NEXT_OBS, "state"][5], rollout[OBS, "state"][1, 3])


def test_add_rollout_of_a_structured_rollout_wraps_and_skips_invalid_steps():
    rollout = structured_rollout(seed=1)
    buffer = structured_buffer(4)
    buffer.add(structured_transitions([50]))  # cursor 1
    buffer.add_rollout(rollout)  # the last 4 of 6 land at slots 1, 2, 3, 0
    order = [(0, 1), (1, 1), (0, 2), (1, 2)]
    slots = [1, 2, 3, 0]
    for key in ("image", "state"):
        for slot, (n, t) in zip(slots, order, strict=True):
            assert torch.equal(buffer.storage[OBS, key][slot], rollout[OBS, key][n, t])
            assert torch.equal(buffer.storage[NEXT_OBS, key][slot], true_next(rollout, key, n, t))
    assert (buffer.cursor, len(buffer)) == (1, 4)

    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[0, 2] = False  # env 0's step after its end was a reset, not a transition
    rollout.set(MASK, mask)
    masked = structured_buffer(10)
    masked.add_rollout(rollout)
    kept = [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2)]
    assert len(masked) == 5
    for key in ("image", "state"):
        for row, (n, t) in enumerate(kept):
            assert torch.equal(masked.storage[OBS, key][row], rollout[OBS, key][n, t])
            assert torch.equal(masked.storage[NEXT_OBS, key][row], true_next(rollout, key, n, t))


def test_a_structured_state_round_trips_exactly_with_uint8_kept():
    buffer = structured_buffer(8, seed=1)
    buffer.add_rollout(structured_rollout())
    buffer.add(structured_transitions(list(range(100, 105))))  # 11 rows: wrapped once
    state = buffer.state_dict()
    assert set(state["storage"]) == {
        "obs/image", "obs/state", "next_obs/image", "next_obs/state",
        ACTION, REWARD, TERMINATED, TRUNCATED,
    }  # fmt: skip
    assert state["storage"]["obs/image"].dtype == torch.uint8
    assert state["storage"]["next_obs/image"].shape == (8, 3, 8, 8)
    restored = structured_buffer(8, seed=99)
    restored.load_state_dict(state)
    restored.generator.set_state(buffer.generator.get_state())
    assert (restored.cursor, len(restored)) == (buffer.cursor, len(buffer)) == (3, 8)
    for key, column in buffer.storage.items(include_nested=True, leaves_only=True):
        assert restored.storage[key].dtype == column.dtype
        assert torch.equal(restored.storage[key], column), key
    a, b = restored.sample(32), buffer.sample(32)
    for key in a.keys(include_nested=True, leaves_only=True):
        assert torch.equal(a[key], b[key]), key
    # A flat buffer's state does not fit: the names differ, and nothing is written.
    with pytest.raises(ValueError, match=r"replay state holds \[.*'obs/state'.*\], the buffer"):
        restored.load_state_dict(make_buffer(8).state_dict())
    assert torch.equal(restored.storage[OBS, "image"], buffer.storage[OBS, "image"])


def test_a_state_saved_before_named_entries_still_loads():
    source = make_buffer(8, seed=1)
    source.add(transitions([1, 2, 3]))
    state = source.state_dict()
    storage = dict(state["storage"])
    storage[OBS] = storage.pop(f"{OBS}/{FLAT_KEY}")  # the old saved names: plain obs columns
    storage[NEXT_OBS] = storage.pop(f"{NEXT_OBS}/{FLAT_KEY}")
    target = make_buffer(8)
    target.load_state_dict(state | {"storage": storage})
    assert target.storage[OBS, FLAT_KEY][:3].tolist() == [[1, 1], [2, 2], [3, 3]]
    assert target.storage[NEXT_OBS, FLAT_KEY][:3].tolist() == [[1.5] * 2, [2.5] * 2, [3.5] * 2]


# StreamReplayBuffer: the online buffer, each observation stored once.


def record(rollout, reference, order):
    """Each transition of a collected rollout, keyed by its action (continuous random actions
    name a transition): its fields and its true next observation, `final_obs[:, t]` where it
    ended (None where it terminated: any finite one will do), else `obs[:, t + 1]`."""
    horizon = rollout.batch_size[1] - 1
    for t in range(horizon):
        for n in range(rollout.batch_size[0]):
            step = rollout[n, t]
            ended = bool(step[TRUNCATED] | step[TERMINATED])
            following = rollout[FINAL_OBS][n, t] if ended else rollout[OBS][n, t + 1]
            key = tuple(step[ACTION].tolist())
            reference[key] = {
                "obs": step[OBS].clone(),
                "next": None if step[TERMINATED] else following.clone(),
                "reward": step[REWARD].item(),
                "terminated": bool(step[TERMINATED]),
                "truncated": bool(step[TRUNCATED]),
                "t": t,
            }
            order.append(key)


def assert_transitions_match(batch, reference):
    """Every row of `batch` is the recorded transition its action names, next_obs included."""
    for i in range(batch.batch_size[0]):
        ref = reference[tuple(batch[ACTION][i].tolist())]
        assert batch[REWARD][i].item() == ref["reward"]
        assert (batch[TERMINATED][i].item(), batch[TRUNCATED][i].item()) == (
            ref["terminated"],
            ref["truncated"],
        )
        for key, value in batch[OBS].items():
            assert torch.equal(value[i], ref["obs"][key]), key
            following = batch[NEXT_OBS, key][i]
            if ref["next"] is None:
                assert following.float().isfinite().all(), key
            else:
                assert torch.equal(following, ref["next"][key]), key


def stored(buffer):
    """The buffer's transitions, oldest first, next_obs materialised (chunks of 7)."""
    return torch.cat(list(buffer.chunks(7)))


@pytest.mark.parametrize(
    ("episode_steps", "assumed_limit", "reset_at"),
    [(5, None, None), (2, 100, None), (5, None, 6)],
    ids=["time-limits", "finals-outgrow-the-bound", "collector-reset-between-rollouts"],
)
def test_stream_next_obs_is_the_envs_real_next_observation(episode_steps, assumed_limit, reset_at):
    """3 camera envs, 4 steps a rollout, 7 rollouts (28 rows) into 10 rows (+ 1 pending):
    the ring wraps twice, episodes cross rollout boundaries, time limits truncate every
    `episode_steps` steps (at t = 3 too: the pending row's transitions), and
    `assumed_limit` lets the finals' room start at 3 x (ceil(11 / 100) + 1) = 6 slots
    where 2-step episodes keep 3 x 5 alive: it must grow, never lose one. `reset_at`: the
    collector is reset before that rollout, whose first observation then is not the pending
    one (row 23, still stored, bootstraps from the pending one)."""
    env = PushCubePixels(3, image_size=16)
    env.set_max_episode_steps(episode_steps)
    rollout = make_rollout(RolloutSpec.for_env(env, 4, with_value=False, with_final_obs=True))
    gen = torch.Generator().manual_seed(0)
    collector = SyncCollector(env, UniformRandomPolicy(env.action_space), rollout, gen)
    collector.reset(seed=0)
    if assumed_limit is None:
        buffer = StreamReplayBuffer.for_env(env, 30, gen)
    else:
        buffer = StreamReplayBuffer(
            30, env.obs_spec, (2,), torch.float32, "cpu", gen,
            num_envs=3, with_success=True, max_episode_steps=assumed_limit,
        )  # fmt: skip
    assert (buffer.capacity, buffer.num_rows) == (30, 11)
    initial_slots = buffer.finals.batch_size[0]
    reference, order = {}, []
    for i in range(7):
        pending = rollout[OBS][:, -1].clone()
        if i == reset_at:
            collector.reset(seed=1)
        collector.collect()
        if i == reset_at:  # the rollout does not continue from the pending observation
            assert not torch.equal(rollout[OBS]["proprio"][:, 0], pending["proprio"])
        buffer.add_rollout(rollout)
        record(rollout, reference, order)
    assert len(buffer) == 30 and len(order) == 84
    everything = stored(buffer)
    assert [tuple(a.tolist()) for a in everything[ACTION]] == order[-30:]
    assert_transitions_match(everything, reference)
    batch = buffer.sample(256)
    assert_transitions_match(batch, reference)
    assert {tuple(a.tolist()) for a in batch[ACTION]} <= set(order[-30:])
    # Time-limit ends are stored, one on the pending row's transitions (t = 3) among them.
    ends = [reference[key]["t"] for key in order[-30:] if reference[key]["truncated"]]
    assert ends and 3 in ends
    assert batch[OBS, "image"].dtype == batch[NEXT_OBS, "image"].dtype == torch.uint8
    assert buffer.storage[OBS, "image"].dtype == buffer.finals["image"].dtype == torch.uint8
    if assumed_limit is not None:
        assert initial_slots == 6 and buffer.finals.batch_size[0] > 6


STREAM_SPEC = {
    "image": ObsEntry((3, 4, 4), torch.uint8),
    "state": ObsEntry((2,), torch.float32),
}


class Streams:
    """Rollouts of N envs x T steps that continue one another as a collector's do: random
    observations, episodes that terminate or truncate at random (sometimes both), the id of
    each transition as its action. `next_step_reset`: a done's true final observation is
    the next step's, and that step is invalid (no transition), as a Gymnasium next-step
    auto-reset env's; otherwise `obs[:, t + 1]` after a done is the next episode's first and
    the final is in `final_obs`. `final_obs` holds garbage where no episode ended."""

    def __init__(self, num_envs, horizon, seed, next_step_reset=False):
        self.rollout = make_rollout(
            RolloutSpec(
                num_envs, horizon, STREAM_SPEC, (1,), torch.float32, False, False,
                torch.device("cpu"), with_mask=next_step_reset, with_final_obs=True,
            )
        )  # fmt: skip
        self.gen = torch.Generator().manual_seed(seed)
        self.next_step_reset = next_step_reset
        self.resetting = torch.zeros(num_envs, dtype=torch.bool)
        self.reference, self.order, self.rows = {}, [], 0  # order: (key, global row)
        self.restart()

    def observations(self):
        n = self.rollout.batch_size[0]
        image = torch.randint(0, 256, (n, 3, 4, 4), generator=self.gen).to(torch.uint8)
        return TensorDict({"image": image, "state": torch.randn(n, 2, generator=self.gen)}, [n])

    def restart(self):
        """The next rollout starts from fresh observations (a collector reset)."""
        self.rollout[OBS][:, -1] = self.observations()
        self.resetting.zero_()

    def collect(self, last=None):
        """Fill the rollout; `last`: the draws that end episodes at its last step ([N]: below
        0.05 terminates, to 0.1 both, to 0.3 truncates, above runs on)."""
        ro, n = self.rollout, self.rollout.batch_size[0]
        ro[OBS][:, 0] = ro[OBS][:, -1]
        horizon = ro.batch_size[1] - 1
        for t in range(horizon):
            ro[ACTION][:, t, 0] = torch.arange(n) + self.rows * n
            ro[REWARD][:, t] = torch.randn(n, generator=self.gen)
            u = torch.rand(n, generator=self.gen)
            if last is not None and t == horizon - 1:
                u = last
            invalid = self.resetting.clone()
            ro[TERMINATED][:, t] = (u < 0.1) & ~invalid
            ro[TRUNCATED][:, t] = (u > 0.05) & (u < 0.3) & ~invalid
            done = ro[TERMINATED][:, t] | ro[TRUNCATED][:, t]
            ro[DONE][:, t] = done
            ro[FINAL_OBS][:, t] = final = self.observations()
            following = self.observations()  # the next obs, or the next episode's first
            if self.next_step_reset:
                ro[MASK][:, t] = ~invalid
                for key in STREAM_SPEC:
                    shape = (n, *[1] * len(STREAM_SPEC[key].shape))
                    following[key] = torch.where(done.view(shape), final[key], following[key])
                self.resetting = done
            ro[OBS][:, t + 1] = following
            for e in range(n):
                if invalid[e]:
                    continue
                step = ro[e, t]
                truth = final[e] if done[e] and not self.next_step_reset else following[e]
                key = tuple(step[ACTION].tolist())
                self.reference[key] = {
                    "obs": step[OBS].clone(),
                    "next": None if step[TERMINATED] else truth.clone(),
                    "reward": step[REWARD].item(),
                    "terminated": bool(step[TERMINATED]),
                    "truncated": bool(step[TRUNCATED]),
                }
                self.order.append((key, self.rows))
            self.rows += 1

    def newest(self, rows):
        """Keys of the valid transitions of the newest `rows` rows, oldest first."""
        return [key for key, row in self.order if row >= self.rows - rows]


def stream_buffer(capacity, num_envs, seed=0, next_step_reset=False, max_episode_steps=4):
    return StreamReplayBuffer(
        capacity, STREAM_SPEC, (1,), torch.float32, "cpu", torch.Generator().manual_seed(seed),
        num_envs=num_envs, with_valid=next_step_reset, max_episode_steps=max_episode_steps,
    )  # fmt: skip


@pytest.mark.parametrize("next_step_reset", [False, True], ids=["same-step", "next-step"])
@pytest.mark.parametrize("copy_final_rows", [True, False], ids=["cpu-gather", "device-select"])
def test_stream_buffer_through_terminations_truncations_resets_and_invalid_steps(
    next_step_reset, copy_final_rows
):
    stream = Streams(4, 5, seed=1, next_step_reset=next_step_reset)
    buffer = stream_buffer(40, 4, next_step_reset=next_step_reset)
    buffer._copy_final_rows = copy_final_rows  # the accelerators' path, on the CPU
    for i in range(9):  # 45 rows into 10 (+ 1 pending): wraps 4 times
        if i == 8:  # the newest row before it (row 39) is still stored
            stream.restart()
        stream.collect()
        buffer.add_rollout(stream.rollout)
    expected = stream.newest(10)
    assert len(buffer) == len(expected)
    everything = stored(buffer)
    assert [tuple(a.tolist()) for a in everything[ACTION]] == expected
    assert_transitions_match(everything, stream.reference)
    batch = buffer.sample(512)
    assert {tuple(a.tolist()) for a in batch[ACTION]} <= set(expected)  # never an invalid one
    assert_transitions_match(batch, stream.reference)
    flags = [stream.reference[key] for key in expected]
    assert any(f["terminated"] for f in flags)
    assert any(f["truncated"] and not f["terminated"] for f in flags)
    if next_step_reset:
        assert len(expected) < 40  # invalid steps are stored, never counted nor drawn
        # Their finals are the following rows': only the restart kept pending ones apart.
        assert 0 < buffer.finals.batch_size[0] <= 4


@pytest.mark.parametrize("next_step_reset", [False, True], ids=["same-step", "next-step"])
def test_stream_sampling_is_uniform_over_the_stored_transitions(next_step_reset):
    stream = Streams(2, 3, seed=2, next_step_reset=next_step_reset)
    buffer = stream_buffer(6, 2, next_step_reset=next_step_reset)
    for _ in range(3):  # 9 rows into 3 (+ 1 pending)
        stream.collect()
        buffer.add_rollout(stream.rollout)
    ids = torch.cat([buffer.sample(100)[ACTION][:, 0].clone() for _ in range(100)]).long()
    counts = torch.bincount(ids, minlength=18)
    kept = [int(key[0]) for key in stream.newest(3)]
    share = 10_000 / len(kept)  # ~1,667 each of 6, more where invalid steps drop some
    assert counts[kept].min() > 0.85 * share and counts[kept].max() < 1.15 * share
    assert counts.sum() == counts[kept].sum()  # nothing older, nothing pending or invalid


def test_a_stream_state_round_trips_exactly_and_resumes_identically():
    # Episodes truncate far more often than the assumed limit: the finals' room has grown.
    stream = Streams(3, 4, seed=3)
    buffer = stream_buffer(27, 3, seed=1, max_episode_steps=100)
    for _ in range(5):  # 20 rows into 9 (+ 1 pending)
        stream.collect()
        buffer.add_rollout(stream.rollout)
    grown = buffer.finals.batch_size[0]
    assert grown > 3 * (1 + 1)
    state = buffer.state_dict()
    assert state["storage"]["obs/image"].dtype == torch.uint8
    assert state["storage"]["obs/image"].shape == (10, 3, 3, 4, 4)  # 9 rows + the pending one
    restored = stream_buffer(27, 3, seed=99, max_episode_steps=100)
    restored.load_state_dict(state)
    assert (restored.row, restored.rows, len(restored)) == (buffer.row, buffer.rows, len(buffer))
    assert restored.finals.batch_size[0] == grown
    assert restored.nominal_bytes == buffer.nominal_bytes
    for _ in range(2):
        restored.generator.set_state(buffer.generator.get_state())
        a, b = restored.sample(64), buffer.sample(64)
        for key in a.keys(include_nested=True, leaves_only=True):
            assert torch.equal(a[key], b[key]), key
        mine, theirs = stored(restored), stored(buffer)
        for key, column in theirs.items(include_nested=True, leaves_only=True):
            assert torch.equal(mine[key], column), key
        stream.collect()  # and both continue alike
        buffer.add_rollout(stream.rollout)
        restored.add_rollout(stream.rollout)
    assert_transitions_match(stored(restored), stream.reference)


def test_a_stream_state_that_does_not_fit_is_refused_before_anything_is_written():
    stream = Streams(3, 4, seed=4)
    buffer = stream_buffer(27, 3)
    stream.collect()
    buffer.add_rollout(stream.rollout)
    before = stored(buffer)
    state = buffer.state_dict()
    with pytest.raises(ValueError, match=r"capacity 27 \(3 envs\) does not fit a buffer of "):
        stream_buffer(30, 3).load_state_dict(state)
    with pytest.raises(ValueError, match="replay state holds explicit transitions"):
        buffer.load_state_dict(make_buffer(27).state_dict())
    pointing = torch.full((4, 3), 7, dtype=torch.int32)  # at finals that were not saved
    broken = state | {"storage": state["storage"] | {FINAL_INDEX: pointing}}
    with pytest.raises(ValueError, match="final_index does not match its"):
        buffer.load_state_dict(broken)
    floats = state | {"storage": state["storage"] | {"obs/state": torch.zeros(5, 3, 2).double()}}
    with pytest.raises(ValueError, match=r"obs/state is torch.float64 \[5, 3, 2\], the buffer"):
        buffer.load_state_dict(floats)
    after = stored(buffer)
    for key, column in before.items(include_nested=True, leaves_only=True):
        assert torch.equal(after[key], column), key


def test_a_rollout_that_does_not_continue_keeps_the_pending_observation_apart():
    stream = Streams(3, 2, seed=9)
    buffer = stream_buffer(12, 3)
    # Env 0's last transition is truncated (its own final kept apart), env 1's terminated,
    # env 2's runs on: it bootstraps from the pending observation.
    stream.collect(last=torch.tensor([0.2, 0.0, 0.5]))
    buffer.add_rollout(stream.rollout)
    stream.restart()  # a collector reset: the next rollout does not start from obs[:, T]
    stream.collect()
    buffer.add_rollout(stream.rollout)
    everything = stored(buffer)
    assert_transitions_match(everything, stream.reference)
    newest_of_first = everything[3:6]  # t = 1 of the first rollout, envs 0, 1, 2
    assert newest_of_first[TRUNCATED].tolist() == [True, False, False]
    assert newest_of_first[TERMINATED].tolist() == [False, True, False]


def test_stream_add_rollout_refuses_a_rollout_of_another_shape():
    stream = Streams(3, 4, seed=5)
    with pytest.raises(ValueError, match="the rollout has 3 envs, the replay buffer 2"):
        stream_buffer(8, 2).add_rollout(stream.rollout)
    with pytest.raises(ValueError, match="lacks `mask`; the replay buffer was built for an env"):
        stream_buffer(9, 3, next_step_reset=True).add_rollout(stream.rollout)
    stream.rollout.del_(FINAL_OBS)
    with pytest.raises(ValueError, match="lacks `final_obs`"):
        stream_buffer(9, 3).add_rollout(stream.rollout)


def test_a_long_rollout_keeps_its_newest_rows():
    stream = Streams(2, 9, seed=6)
    buffer = stream_buffer(6, 2)  # 3 rows (+ 1 pending) for 9 steps
    stream.collect()
    buffer.add_rollout(stream.rollout)
    assert len(buffer) == 6
    everything = stored(buffer)
    assert [tuple(a.tolist()) for a in everything[ACTION]] == stream.newest(3)
    assert_transitions_match(everything, stream.reference)


def test_stream_images_take_about_their_raw_bytes_once():
    """3 x 64 x 64 camera frames: bytes per stored transition within 1.1 x the raw
    observation plus the scalars (an explicit buffer stores each frame twice)."""
    spec = {"image": ObsEntry((3, 64, 64), torch.uint8), "proprio": ObsEntry((4,), torch.float32)}
    action_dim, capacity = 2, 2048
    buffer = StreamReplayBuffer(
        capacity, spec, (action_dim,), torch.float32, "cpu", torch.Generator(),
        num_envs=8, with_success=True, max_episode_steps=100,
    )  # fmt: skip
    scalars = 4 * action_dim + 4 + 1 + 1 + 1  # action, reward, terminated, truncated, success
    raw = sum(entry.nbytes for entry in spec.values()) + scalars
    per_transition = buffer.nominal_bytes / buffer.capacity
    assert buffer.capacity == capacity and per_transition <= 1.1 * raw
    explicit = ReplayBuffer(capacity, spec, (action_dim,), torch.float32, "cpu", None, True)
    assert explicit.nominal_bytes / capacity > 1.8 * per_transition


def test_a_stream_buffer_saves_as_a_dataset_of_explicit_transitions(tmp_path):
    stream = Streams(3, 4, seed=7)
    buffer = stream_buffer(27, 3)
    for _ in range(4):  # wrapped
        stream.collect()
        buffer.add_rollout(stream.rollout)
    save_dataset(tmp_path / "data", buffer, source={"env": "streams"})
    loaded = load_dataset(tmp_path / "data", "cpu", torch.Generator())
    expected = stored(buffer)
    assert len(loaded) == len(buffer) == 27
    for key, column in expected.items(include_nested=True, leaves_only=True):
        assert torch.equal(loaded.storage[key], column), key
    assert_transitions_match(loaded.storage, stream.reference)


def test_concurrent_stream_adds_and_samples_never_tear_a_transition():
    stream = Streams(4, 2, seed=8)
    buffer = stream_buffer(32, 4)
    stream.collect()
    buffer.add_rollout(stream.rollout)
    stop, torn = threading.Event(), []

    def sampler():
        while not stop.is_set():
            batch = buffer.sample(16).clone()
            try:
                assert_transitions_match(batch, stream.reference)
            except AssertionError:
                torn.append(batch)

    thread = threading.Thread(target=sampler)
    thread.start()
    try:
        for _ in range(60):
            stream.collect()
            buffer.add_rollout(stream.rollout)
    finally:
        stop.set()
        thread.join()
    assert not torn
