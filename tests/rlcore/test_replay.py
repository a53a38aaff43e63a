import threading

import pytest
import torch
from tensordict import TensorDict

from rlcore.envs.cartpole import CartPole
from rlcore.envs.pendulum import Pendulum
from rlcore.envs.push_cube import PushCube
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


def transitions(ids, obs_dim=2):
    """Transitions whose every field encodes its id (so a torn one is visible)."""
    ids = torch.as_tensor(ids, dtype=torch.float32)
    return TensorDict(
        {
            OBS: ids[:, None].expand(-1, obs_dim).clone(),
            ACTION: ids[:, None].clone(),
            REWARD: ids.clone(),
            NEXT_OBS: (ids[:, None] + 0.5).expand(-1, obs_dim).clone(),
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
        2, 3, 1, (1,), torch.float32, False, False, torch.device("cpu"), with_final_obs=True
    )
    rollout = make_rollout(spec)
    # obs[n, t] = 10 n + t; after a done, obs[:, t + 1] is the next episode's first (100+).
    rollout[OBS][:] = torch.tensor([[0.0, 1.0, 100.0, 101.0], [10.0, 11.0, 12.0, 110.0]])[..., None]
    rollout[ACTION][:] = torch.arange(8.0).view(2, 4, 1)
    rollout[REWARD][:] = torch.arange(8.0).view(2, 4) / 10
    rollout[TRUNCATED][0, 1] = True
    rollout[TERMINATED][1, 2] = True
    rollout[DONE][:] = rollout[TRUNCATED] | rollout[TERMINATED]
    rollout[FINAL_OBS][0, 1] = torch.tensor([2.0])  # the truncated episode's true last obs
    rollout[FINAL_OBS][1, 2] = torch.tensor([13.0])
    return rollout


def test_add_rollout_stores_true_final_observations_time_step_by_time_step():
    buffer = ReplayBuffer(10, 1, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add_rollout(tiny_rollout())
    stored = buffer.storage[: len(buffer)]
    assert len(buffer) == 6
    # Order: t=0 (env 0, env 1), t=1 (...), t=2 (...).
    assert stored[OBS].squeeze(-1).tolist() == [0, 10, 1, 11, 100, 12]
    # next_obs: obs[:, t+1], except the final observations at the two done transitions.
    assert stored[NEXT_OBS].squeeze(-1).tolist() == [1, 11, 2, 12, 101, 13]
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
    assert buffer.storage[OBS][: len(buffer)].squeeze(-1).tolist() == [0, 10, 1, 11, 12]


def test_state_round_trip_is_exact_and_sampling_continues_identically():
    buffer = make_buffer(8, seed=1)
    buffer.add(transitions(list(range(11))))  # wrapped once
    state = buffer.state_dict()
    restored = make_buffer(8, seed=99)
    restored.load_state_dict(state)
    restored.generator.set_state(buffer.generator.get_state())
    assert (restored.cursor, len(restored)) == (buffer.cursor, len(buffer))
    assert (restored.storage == buffer.storage).all()
    assert torch.equal(restored.sample(32)[OBS], buffer.sample(32)[OBS])
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
                [batch[OBS], batch[ACTION], batch[NEXT_OBS] - 0.5], dim=1
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
    assert buffer.storage[OBS].shape == buffer.storage[NEXT_OBS].shape == (16, env.obs_dim)
    assert len(buffer.storage.keys()) == keys and len(buffer) == 0


def test_add_rollout_wraps_around_the_end():
    buffer = ReplayBuffer(4, 1, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add_rollout(tiny_rollout())  # 6 transitions into 4 slots: the last 4 are kept
    # The last 4 of the time-major order [0, 10, 1, 11, 100, 12] land in slots 0..3.
    assert buffer.storage[OBS].squeeze(-1).tolist() == [1, 11, 100, 12]
    assert (buffer.cursor, len(buffer)) == (0, 4)
    buffer.add(transitions([50], obs_dim=1))  # cursor 0 -> 1
    buffer.add_rollout(tiny_rollout())
    # Again only the last 4 (obs 1, 11, 100, 12) survive, written from the cursor (slots
    # 1, 2, 3) and wrapping to slot 0, over the 50 added just before.
    assert buffer.storage[OBS].squeeze(-1).tolist() == [12, 1, 11, 100]
    assert buffer.storage[NEXT_OBS].squeeze(-1).tolist() == [13, 2, 12, 101]
    assert (buffer.cursor, len(buffer)) == (1, 4)


def test_add_rollout_splits_a_write_that_crosses_the_end():
    buffer = ReplayBuffer(8, 1, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add(transitions([50, 51, 52, 53, 54], obs_dim=1))  # cursor 5
    buffer.add_rollout(tiny_rollout())  # 3 rows at 5..7, 3 rows at 0..2
    assert buffer.storage[OBS].squeeze(-1).tolist() == [11, 100, 12, 53, 54, 0, 10, 1]
    assert buffer.storage[NEXT_OBS].squeeze(-1).tolist() == [12, 101, 13, 53.5, 54.5, 1, 11, 2]
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
    pointers = {key: t.data_ptr() for key, t in first.items()}
    second = buffer.sample(8)
    assert second is first and {k: t.data_ptr() for k, t in second.items()} == pointers
    assert buffer.sample(4) is not first


def test_a_state_of_another_shape_is_refused_before_anything_is_written():
    state = make_buffer(8, obs_dim=3).state_dict()
    target = make_buffer(8, obs_dim=2)
    target.add(transitions([7]))
    with pytest.raises(ValueError, match=r"obs is torch.float32 \[0, 3\], the buffer needs"):
        target.load_state_dict(state)
    assert (target.cursor, len(target)) == (1, 1) and target.storage[REWARD][0] == 7


def test_load_keeps_the_storage_identity():
    source = make_buffer(8, seed=1)
    source.add(transitions([1, 2, 3]))
    target = make_buffer(8)
    pointers = {key: t.data_ptr() for key, t in target.storage.items()}
    target.load_state_dict(source.state_dict())
    assert {key: t.data_ptr() for key, t in target.storage.items()} == pointers
    assert target.storage[REWARD][:3].tolist() == [1, 2, 3]
