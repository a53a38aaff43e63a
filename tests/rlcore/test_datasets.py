import json
import shutil
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

from rlcore.datasets import DatasetError, check_dataset_fits, load_dataset, save_dataset
from rlcore.observations import FLAT_KEY, ObsEntry, as_spec
from rlcore.replay import NEXT_OBS, ReplayBuffer
from rlcore.rollout import ACTION, OBS, REWARD, SUCCESS, TERMINATED, TRUNCATED


def leaves(storage):
    """(key, column) of every stored tensor; observation entries are nested keys."""
    return list(storage.items(include_nested=True, leaves_only=True))


def flat_columns(storage):
    """The storage as rlcore laid it out before named observation entries: `obs` and
    `next_obs` plain `[C, obs_dim]` columns."""
    columns = dict(storage.items())
    columns[OBS], columns[NEXT_OBS] = storage[OBS, FLAT_KEY], storage[NEXT_OBS, FLAT_KEY]
    return TensorDict(columns, batch_size=storage.batch_size)


def buffer_of(ids, capacity):
    buffer = ReplayBuffer(capacity, 2, (1,), torch.float32, "cpu", torch.Generator())
    ids = torch.as_tensor(ids, dtype=torch.float32)
    buffer.add(
        TensorDict(
            {
                OBS: {FLAT_KEY: ids[:, None].expand(-1, 2).clone()},
                ACTION: ids[:, None].clone(),
                REWARD: ids.clone(),
                NEXT_OBS: {FLAT_KEY: ids[:, None].expand(-1, 2) + 1},
                TERMINATED: ids > 5,
                TRUNCATED: ids == 3,
            },
            batch_size=[len(ids)],
        )
    )
    return buffer


def test_a_saved_dataset_loads_as_the_same_transitions_oldest_first(tmp_path):
    buffer = buffer_of(list(range(7)), capacity=5)  # wrapped: holds 2..6, cursor mid-way
    save_dataset(tmp_path / "data", buffer, source={"env": "pendulum"})
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["transitions"] == 5 and meta["source"] == {"env": "pendulum"}
    loaded = load_dataset(tmp_path / "data", "cpu", torch.Generator())
    assert len(loaded) == 5 and loaded.storage[REWARD].tolist() == [2, 3, 4, 5, 6]
    assert loaded.storage[TERMINATED].tolist() == [False, False, False, False, True]
    assert torch.equal(loaded.storage[NEXT_OBS, FLAT_KEY], loaded.storage[OBS, FLAT_KEY] + 1)


def test_saving_again_replaces_the_dataset_whole(tmp_path):
    save_dataset(tmp_path / "data", buffer_of([1, 2, 3], 3), source={})
    save_dataset(tmp_path / "data", buffer_of([9], 1), source={})
    assert load_dataset(tmp_path / "data", "cpu", torch.Generator()).storage[REWARD].tolist() == [9]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no temporaries left


def test_meta_checks_name_the_mismatch_before_loading(tmp_path):
    save_dataset(tmp_path / "data", buffer_of([1, 2], 2), source={})
    assert (
        check_dataset_fits(tmp_path / "data", as_spec(2), (1,), torch.float32)["transitions"] == 2
    )
    with pytest.raises(DatasetError, match=r"obs has shape \[2\] but the env's is \[3\]"):
        check_dataset_fits(tmp_path / "data", as_spec(3), (1,), torch.float32)
    with pytest.raises(DatasetError, match=r"action is float32 \[1\] but the env's is int64 \[\]"):
        check_dataset_fits(tmp_path / "data", as_spec(2), (), torch.int64)


def test_a_missing_or_damaged_dataset_is_one_clear_error(tmp_path):
    with pytest.raises(
        DatasetError, match=r"replay.offline.path: dataset .*nowhere does not exist"
    ):
        check_dataset_fits(tmp_path / "nowhere", as_spec(2), (1,), torch.float32)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "meta.json").write_text("{not json")
    with pytest.raises(DatasetError, match=r"meta\.json is missing or damaged"):
        load_dataset(tmp_path / "broken", "cpu", torch.Generator())


def test_data_that_contradicts_its_meta_is_refused_naming_the_key(tmp_path):
    save_dataset(tmp_path / "data", buffer_of([1, 2], 2), source={})
    meta_path = tmp_path / "data" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(meta | {"obs_dim": 3}))  # the stored obs are [2]
    with pytest.raises(
        DatasetError,
        match=r"transitions/obs\.memmap holds 16 bytes, meta\.json implies 24 "
        r"\(2 rows of float32 \[3\]\)",
    ):
        load_dataset(tmp_path / "data", "cpu", torch.Generator())
    meta_path.write_text(json.dumps(meta | {"action_dtype": "banana"}))
    with pytest.raises(DatasetError, match="action_dtype 'banana' is no torch dtype"):
        check_dataset_fits(tmp_path / "data", as_spec(2), (1,), torch.float32)


def test_a_missing_directory_fails_to_load_naming_the_path(tmp_path):
    with pytest.raises(DatasetError, match=r"dataset .*absent does not exist"):
        load_dataset(tmp_path / "absent", "cpu", torch.Generator())


def test_an_empty_buffer_is_not_saved(tmp_path):
    empty = ReplayBuffer(4, 2, (1,), torch.float32, "cpu", torch.Generator())
    with pytest.raises(ValueError, match="the replay buffer is empty"):
        save_dataset(tmp_path / "data", empty, source={})
    assert not any(tmp_path.iterdir())


def test_importing_the_datasets_module_stays_light():
    # tests/test_import_purity.py imports rlcore.trainer, which imports this module lazily.
    code = (
        "import sys, rlcore.datasets;"
        "print(','.join(m for m in ('prefect', 'dvc', 'optuna', 'pydantic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def success_buffer():
    """Discrete actions and a success column: every dtype the buffer stores."""
    buffer = ReplayBuffer(3, 2, (), torch.int64, "cpu", torch.Generator(), with_success=True)
    ids = torch.tensor([1.0, 2.0, 3.0])
    buffer.add(
        TensorDict(
            {
                OBS: {FLAT_KEY: ids[:, None].expand(-1, 2).clone()},
                ACTION: torch.tensor([4, -5, 2**40]),
                REWARD: ids * 0.5,
                NEXT_OBS: {FLAT_KEY: ids[:, None].expand(-1, 2) + 1},
                TERMINATED: torch.tensor([False, True, False]),
                TRUNCATED: torch.tensor([False, False, True]),
                SUCCESS: torch.tensor([True, False, True]),
            },
            batch_size=[3],
        )
    )
    return buffer


def test_every_column_and_dtype_round_trips_exactly(tmp_path):
    buffer = success_buffer()
    save_dataset(tmp_path / "data", buffer, source={})
    loaded = load_dataset(tmp_path / "data", "cpu", torch.Generator())
    assert set(loaded.storage.keys(True, True)) == set(buffer.storage.keys(True, True))
    for key, column in leaves(buffer.storage):
        assert loaded.storage[key].dtype == column.dtype and torch.equal(
            loaded.storage[key], column
        )
    assert loaded.storage[ACTION].tolist() == [4, -5, 2**40]


def test_a_dataset_stays_readable_by_tensordict_without_pickle(tmp_path):
    # Format 1 unchanged: older rlcore (TensorDict.load_memmap) reads what this one writes.
    buffer = success_buffer()
    save_dataset(tmp_path / "data", buffer, source={})
    rows = TensorDict.load_memmap(tmp_path / "data" / "transitions", allow_pickle=False)
    assert torch.equal(rows[ACTION], buffer.storage[ACTION])
    assert torch.equal(rows[SUCCESS], buffer.storage[SUCCESS])


def test_a_dataset_written_by_tensordict_memmap_still_loads(tmp_path):
    # How rlcore wrote datasets before it wrote raw files itself: same format, same result.
    buffer = success_buffer()
    save_dataset(tmp_path / "data", buffer, source={})
    shutil.rmtree(tmp_path / "data" / "transitions")
    flat_columns(buffer.storage).cpu().memmap(tmp_path / "data" / "transitions")
    loaded = load_dataset(tmp_path / "data", "cpu", torch.Generator())
    assert torch.equal(loaded.storage[ACTION], buffer.storage[ACTION])
    assert torch.equal(loaded.storage[SUCCESS], buffer.storage[SUCCESS])


def test_a_large_dataset_is_read_in_chunks_in_order(tmp_path, monkeypatch):
    import rlcore.datasets

    monkeypatch.setattr(rlcore.datasets, "_READ_CHUNK_BYTES", 40)  # rows of 26 bytes: one a chunk
    save_dataset(tmp_path / "data", buffer_of(list(range(7)), 7), source={})
    loaded = load_dataset(tmp_path / "data", "cpu", torch.Generator())
    assert loaded.storage[REWARD].tolist() == list(range(7))
    assert loaded.storage[TERMINATED].tolist() == [i > 5 for i in range(7)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_dataset_loads_onto_cuda(tmp_path):
    buffer = success_buffer()
    save_dataset(tmp_path / "data", buffer, source={})
    loaded = load_dataset(tmp_path / "data", "cuda", torch.Generator("cuda"))
    assert loaded.storage[OBS, FLAT_KEY].is_cuda
    for key, column in leaves(buffer.storage):
        assert torch.equal(loaded.storage[key].cpu(), column)


# Named observation entries: a camera frame (uint8, stored as uint8) beside a state vector.
IMAGE_SPEC = {
    "image": ObsEntry((3, 8, 8), torch.uint8),
    "state": ObsEntry((4,), torch.float32),
}


def structured_buffer(ids, capacity):
    """Random images and states (every bit pattern of uint8), ids in the reward."""
    buffer = ReplayBuffer(
        capacity, IMAGE_SPEC, (), torch.int64, "cpu", torch.Generator(), with_success=True
    )
    gen = torch.Generator().manual_seed(0)
    n = len(ids)

    def entries():
        image = torch.randint(0, 256, (n, 3, 8, 8), generator=gen).to(torch.uint8)
        return {"image": image, "state": torch.randn(n, 4, generator=gen)}

    ids = torch.as_tensor(ids, dtype=torch.float32)
    buffer.add(
        TensorDict(
            {
                OBS: entries(),
                ACTION: ids.long() * 3 - 2**40,
                REWARD: ids.clone(),
                NEXT_OBS: entries(),
                TERMINATED: ids > 5,
                TRUNCATED: ids == 3,
                SUCCESS: ids % 2 == 1,
            },
            batch_size=[n],
        )
    )
    return buffer


def oldest_first(buffer):
    """The buffer's filled rows, oldest first (what a dataset holds)."""
    start = buffer.cursor if len(buffer) == buffer.capacity else 0
    return buffer.storage[(torch.arange(len(buffer)) + start) % buffer.capacity]


def test_a_structured_dataset_is_written_in_format_2_and_loads_bit_identically(tmp_path):
    buffer = structured_buffer(list(range(7)), capacity=5)  # wrapped: holds 2..6
    save_dataset(tmp_path / "data", buffer, source={"env": "camera"})
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["format_version"] == 2 and meta["transitions"] == 5
    assert meta["obs"] == {
        "image": {"shape": [3, 8, 8], "dtype": "uint8"},
        "state": {"shape": [4], "dtype": "float32"},
    }
    assert "obs_dim" not in meta
    assert (meta["action_shape"], meta["action_dtype"], meta["with_success"]) == ([], "int64", True)
    transitions = tmp_path / "data" / "transitions"
    assert {p.name for p in transitions.iterdir()} == {
        "obs.image.memmap", "obs.state.memmap", "next_obs.image.memmap",
        "next_obs.state.memmap", "action.memmap", "reward.memmap", "terminated.memmap",
        "truncated.memmap", "success.memmap",
    }  # fmt: skip
    # uint8 on disk: one byte a pixel, the rows oldest first.
    expected = oldest_first(buffer)
    assert (transitions / "obs.image.memmap").read_bytes() == (
        expected[OBS, "image"].contiguous().numpy().tobytes()
    )
    assert (transitions / "obs.state.memmap").stat().st_size == 5 * 4 * 4

    loaded = load_dataset(tmp_path / "data", "cpu", torch.Generator())
    assert len(loaded) == 5 and loaded.storage[REWARD].tolist() == [2, 3, 4, 5, 6]
    assert set(loaded.storage.keys(True, True)) == set(buffer.storage.keys(True, True))
    for key, column in leaves(expected):
        assert loaded.storage[key].dtype == column.dtype, key
        assert torch.equal(loaded.storage[key], column), key
    assert loaded.storage[OBS, "image"].dtype == torch.uint8


def test_check_dataset_fits_refuses_another_observation_naming_the_entry(tmp_path):
    save_dataset(tmp_path / "data", structured_buffer([1, 2], 2), source={})
    meta = check_dataset_fits(tmp_path / "data", IMAGE_SPEC, (), torch.int64)
    assert meta["transitions"] == 2 and meta["obs_spec"] == IMAGE_SPEC
    ours = r"obs is image uint8 \[3, 8, 8\], state float32 \[4\] but the env's is "
    bigger = IMAGE_SPEC | {"image": ObsEntry((3, 16, 16), torch.uint8)}
    with pytest.raises(DatasetError, match=ours + r"image uint8 \[3, 16, 16\], state"):
        check_dataset_fits(tmp_path / "data", bigger, (), torch.int64)
    floats = IMAGE_SPEC | {"image": ObsEntry((3, 8, 8), torch.float32)}
    with pytest.raises(DatasetError, match=ours + r"image float32 \[3, 8, 8\], state"):
        check_dataset_fits(tmp_path / "data", floats, (), torch.int64)
    renamed = {"camera": IMAGE_SPEC["image"], "state": IMAGE_SPEC["state"]}
    with pytest.raises(DatasetError, match=ours + r"camera uint8 \[3, 8, 8\], state"):
        check_dataset_fits(tmp_path / "data", renamed, (), torch.int64)
    with pytest.raises(DatasetError, match=ours + r"state float32 \[4\]$"):
        check_dataset_fits(tmp_path / "data", as_spec(4), (), torch.int64)
    # A flat env's dataset does not feed a camera env either.
    save_dataset(tmp_path / "flat", buffer_of([1, 2], 2), source={})
    with pytest.raises(DatasetError, match=r"obs is state float32 \[2\] but the env's is image"):
        check_dataset_fits(tmp_path / "flat", IMAGE_SPEC, (1,), torch.float32)


def test_a_structured_dataset_is_read_in_chunks_and_replaced_whole(tmp_path, monkeypatch):
    import rlcore.datasets

    buffer = structured_buffer(list(range(7)), capacity=7)
    save_dataset(tmp_path / "data", buffer, source={})
    monkeypatch.setattr(rlcore.datasets, "_READ_CHUNK_BYTES", 500)  # rows of 431 bytes: one a chunk
    loaded = load_dataset(tmp_path / "data", "cpu", torch.Generator())
    for key, column in leaves(buffer.storage):
        assert torch.equal(loaded.storage[key], column), key
    save_dataset(tmp_path / "data", buffer_of([9], 1), source={})  # a format-2 dataset is ours
    assert load_dataset(tmp_path / "data", "cpu", torch.Generator()).storage[REWARD].tolist() == [9]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
