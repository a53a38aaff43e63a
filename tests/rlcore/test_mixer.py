import pytest
import torch
from tensordict import TensorDict

from rlcore.mixer import DataMixer
from rlcore.observations import FLAT_KEY, as_spec
from rlcore.replay import NEXT_OBS, ReplayBuffer
from rlcore.rollout import ACTION, OBS, REWARD, TERMINATED, TRUNCATED, RolloutSpec, make_rollout
from rlcore.stream_replay import StreamReplayBuffer


def filled(value, obs_dim=3, size=20):
    buffer = ReplayBuffer(size, obs_dim, (2,), torch.float32, "cpu", torch.Generator())
    ones = torch.ones(size)
    buffer.add(
        TensorDict(
            {
                OBS: {FLAT_KEY: torch.full((size, obs_dim), value)},
                ACTION: torch.zeros(size, 2),
                REWARD: ones * value,
                NEXT_OBS: {FLAT_KEY: torch.zeros(size, obs_dim)},
                TERMINATED: torch.zeros(size, dtype=torch.bool),
                TRUNCATED: torch.zeros(size, dtype=torch.bool),
            },
            batch_size=[size],
        )
    )
    return buffer


@pytest.mark.parametrize(("fraction", "offline_rows"), [(0.0, 0), (0.25, 16), (1.0, 64)])
def test_a_batch_takes_its_share_of_rows_from_the_offline_data(fraction, offline_rows):
    mixer = DataMixer(filled(1.0), filled(-1.0), fraction)
    reward = mixer.sample(64)[REWARD]
    # Offline rows (reward -1) come first, online rows (+1) after.
    assert reward.tolist() == [-1.0] * offline_rows + [1.0] * (64 - offline_rows)


def test_offline_only_training_needs_no_online_data():
    empty = ReplayBuffer(5, 3, (2,), torch.float32, "cpu", torch.Generator())
    assert (DataMixer(empty, filled(-1.0), 1.0).sample(8)[REWARD] == -1).all()


def test_a_dataset_of_another_shape_is_refused_naming_the_key():
    with pytest.raises(
        ValueError, match=r"offline dataset's obs/state is .* shape \[5\] but the env's"
    ):
        DataMixer(filled(1.0), filled(-1.0, obs_dim=5), 0.5)
    with pytest.raises(ValueError, match="needs an offline buffer"):
        DataMixer(filled(1.0), None, 0.5)


def test_the_offline_fraction_must_be_a_share():
    with pytest.raises(ValueError, match=r"offline_fraction must be in \[0, 1\], got 1.5"):
        DataMixer(filled(1.0), filled(-1.0), 1.5)


def test_a_dataset_with_other_keys_is_refused_naming_them():
    with_success = ReplayBuffer(4, 3, (2,), torch.float32, "cpu", torch.Generator(), True)
    with pytest.raises(ValueError, match=r"offline dataset holds \[.*'success'.*\], the env's"):
        DataMixer(filled(1.0), with_success, 0.5)


def test_an_empty_side_is_named_when_it_is_needed():
    empty = ReplayBuffer(5, 3, (2,), torch.float32, "cpu", torch.Generator())
    with pytest.raises(ValueError, match="the offline dataset is empty"):
        DataMixer(filled(1.0), empty, 0.5).sample(8)
    with pytest.raises(ValueError, match="cannot draw 4 online rows: the online replay buffer"):
        DataMixer(empty, filled(-1.0), 0.5).sample(8)
    # Fraction 0 never touches the (empty) offline side.
    assert (DataMixer(filled(1.0), empty, 0.0).sample(8)[REWARD] == 1).all()


def test_both_sides_write_into_one_reused_batch():
    mixer = DataMixer(filled(1.0), filled(-1.0), 0.5)
    first = mixer.sample(8)
    pointer = first[OBS, FLAT_KEY].data_ptr()
    second = mixer.sample(8)
    assert second is first and second[OBS, FLAT_KEY].data_ptr() == pointer
    assert second[REWARD].tolist() == [-1.0] * 4 + [1.0] * 4


def test_an_online_stream_buffer_and_an_offline_dataset_mix_into_one_batch():
    """The online buffer stores each observation once, the dataset obs and next_obs: both
    sample into the same layout, so one batch holds both."""
    spec = RolloutSpec(
        2, 3, as_spec(3), (2,), torch.float32, False, False, torch.device("cpu"),
        with_final_obs=True,
    )  # fmt: skip
    rollout = make_rollout(spec)
    rollout[OBS, FLAT_KEY][:] = torch.arange(8.0).view(2, 4, 1)  # obs[n, t] = 4 n + t
    rollout[REWARD][:] = 1.0
    online = StreamReplayBuffer(
        6, 3, (2,), torch.float32, "cpu", torch.Generator(), num_envs=2, max_episode_steps=10
    )
    online.add_rollout(rollout)
    mixer = DataMixer(online, filled(-1.0), 0.5)
    batch = mixer.sample(64)
    assert batch[REWARD].tolist() == [-1.0] * 32 + [1.0] * 32
    rows = batch[32:]
    assert torch.equal(rows[NEXT_OBS, FLAT_KEY], rows[OBS, FLAT_KEY] + 1)  # obs[n, t + 1]
    assert (batch[:32][NEXT_OBS, FLAT_KEY] == 0).all()  # the dataset's own next_obs
    with pytest.raises(ValueError, match=r"offline dataset's obs/state is .* \[3\] but the env's"):
        DataMixer(
            StreamReplayBuffer(6, 5, (2,), torch.float32, "cpu", torch.Generator(), num_envs=2),
            filled(-1.0),
            0.5,
        )
