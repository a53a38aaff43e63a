import threading

import pytest
import torch
from tensordict import TensorDict

from rlcore.envs.cartpole import CartPole
from rlcore.envs.pendulum import Pendulum
from rlcore.envs.push_cube import PushCube
from rlcore.observations import FLAT_KEY, ObsEntry, as_spec
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
