"""Datasets are shared data, never code (issue 43): hostile or damaged datasets are refused
with one line, reading never writes, and saving replaces nothing but a dataset."""

import errno
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import rlcore.dataset_format
import rlcore.dataset_writing
import rlcore.datasets
from rlcore.datasets import (
    DatasetError,
    check_replaceable,
    load_dataset,
    remove_interrupted_saves,
    save_dataset,
)
from rlcore.observations import FLAT_KEY, ObsEntry
from rlcore.replay import NEXT_OBS, ReplayBuffer
from rlcore.rollout import ACTION, OBS, REWARD, TERMINATED, TRUNCATED

REPO = Path(__file__).resolve().parents[2]


def buffer_of(rows: int, obs_dim: int = 12) -> ReplayBuffer:
    buffer = ReplayBuffer(rows, obs_dim, (1,), torch.float32, "cpu", torch.Generator())
    obs = torch.arange(rows * obs_dim, dtype=torch.float32).reshape(rows, obs_dim)
    buffer.add(
        TensorDict(
            {
                OBS: {FLAT_KEY: obs},
                ACTION: obs[:, :1] * 2,
                REWARD: obs[:, 0] * 3,
                NEXT_OBS: {FLAT_KEY: obs + 1},
                TERMINATED: torch.arange(rows) % 7 == 0,
                TRUNCATED: torch.arange(rows) % 5 == 0,
            },
            batch_size=[rows],
        )
    )
    return buffer


@pytest.fixture
def data(tmp_path):
    """2,048 transitions of 12 floats: obs.memmap holds 98,304 bytes."""
    save_dataset(tmp_path / "data", buffer_of(2048), source={})
    return tmp_path / "data"


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file's bytes, size and mtime under `folder`."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


class Touch:
    """Unpickling this creates `marker`: what a hostile payload would do, harmlessly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def plant_pickled_leaf(transitions: Path, marker: Path) -> None:
    """A non-tensor leaf whose `other.pickle` tensordict unpickles when it loads the folder."""
    leaf = transitions / "payload"
    leaf.mkdir()
    kind = "<class 'tensordict.tensorclass.NonTensorData'>"
    (leaf / "meta.json").write_text(json.dumps({"_type": kind, "_is_non_tensor": True}))
    (leaf / "other.pickle").write_bytes(pickle.dumps(Touch(marker)))
    td_meta = json.loads((transitions / "meta.json").read_text())
    (transitions / "meta.json").write_text(json.dumps(td_meta | {"payload": {"type": "x"}}))


def test_a_pickled_leaf_in_transitions_is_refused_and_never_runs(data, tmp_path):
    plant_pickled_leaf(data / "transitions", tmp_path / "pwned")
    # The payload is live: tensordict, asked to trust pickles, runs it (on a copy).
    shutil.copytree(data, tmp_path / "copy")
    with pytest.raises(TypeError):  # raised after the payload ran: it returns no dict
        TensorDict.load_memmap(tmp_path / "copy" / "transitions", allow_pickle=True)
    assert (tmp_path / "pwned").exists()
    (tmp_path / "pwned").unlink()

    with pytest.raises(DatasetError, match=r"transitions/payload is not part of a dataset"):
        load_dataset(data, "cpu", torch.Generator())
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["other.pickle", "obs.pickle", ".hidden", "success.memmap"])
def test_any_file_that_is_not_ours_is_refused_by_name(data, tmp_path, name):
    (data / "transitions" / name).write_bytes(pickle.dumps(Touch(tmp_path / "pwned")))
    with pytest.raises(DatasetError, match=rf"transitions/{name} is not part of a dataset"):
        load_dataset(data, "cpu", torch.Generator())
    assert not (tmp_path / "pwned").exists()


def test_a_truncated_file_is_refused_and_left_as_it_was(data):
    obs = data / "transitions" / "obs.memmap"
    os.truncate(obs, 98_304 // 4)
    before = snapshot(data)
    with pytest.raises(DatasetError) as err:
        load_dataset(data, "cpu", torch.Generator())
    assert str(err.value) == (
        f"dataset {data}: transitions/obs.memmap holds 24,576 bytes, meta.json implies 98,304 "
        "(2,048 rows of float32 [12])"
    )
    assert snapshot(data) == before and obs.stat().st_size == 24_576


def test_an_oversized_or_missing_file_is_refused(data):
    with (data / "transitions" / "reward.memmap").open("ab") as handle:
        handle.write(b"\0" * 4)
    with pytest.raises(DatasetError, match=r"reward\.memmap holds 8,196 bytes, .* 8,192"):
        load_dataset(data, "cpu", torch.Generator())
    (data / "transitions" / "reward.memmap").unlink()
    with pytest.raises(DatasetError, match=r"transitions/reward\.memmap is missing"):
        load_dataset(data, "cpu", torch.Generator())


def test_a_special_file_is_refused_without_blocking(data):
    obs = data / "transitions" / "obs.memmap"
    obs.unlink()
    os.mkfifo(obs)  # reading a FIFO with no writer would wait forever
    with pytest.raises(DatasetError, match=r"obs\.memmap cannot be read \(not a regular file\)"):
        load_dataset(data, "cpu", torch.Generator())


def test_a_read_only_dataset_loads_and_nothing_changes(data):
    before = snapshot(data)
    folders = [data, data / "transitions"]
    for path in [*(data / "transitions").iterdir(), data / "meta.json"]:
        path.chmod(0o444)
    for folder in folders:
        folder.chmod(0o555)
    try:
        loaded = load_dataset(data, "cpu", torch.Generator())
    finally:
        for folder in folders:
            folder.chmod(0o755)
    assert torch.equal(loaded.storage[OBS, FLAT_KEY], buffer_of(2048).storage[OBS, FLAT_KEY])
    assert snapshot(data) == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"transitions": 10**15}, r"obs\.memmap holds 98,304 bytes, meta\.json implies"),
        ({"obs_dim": 10**15}, r"obs\.memmap holds 98,304 bytes, meta\.json implies"),
        ({"obs_dim": -1}, r"obs_dim and action_shape must be positive"),
        (
            {"action_dtype": "qint8"},
            r"action_dtype 'qint8' is no torch dtype a dataset holds \(one of bfloat16, bool",
        ),
        ({"transitions": 0}, r"meta\.json says it holds no transitions"),
    ],
)
def test_meta_json_claims_are_checked_before_any_allocation(data, change, message):
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps(meta | change))
    with pytest.raises(DatasetError, match=message):
        load_dataset(data, "cpu", torch.Generator())


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, '{"pad": "' + "x" * (1 << 20) + '"}', "\xff"]
)
def test_a_hostile_meta_json_is_one_line(data, text):
    (data / "meta.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(DatasetError, match=r"meta\.json is missing or damaged") as err:
        load_dataset(data, "cpu", torch.Generator())
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_saving_replaces_nothing_that_is_not_a_dataset(tmp_path, data):
    source = tmp_path / "rlcore"
    source.mkdir()
    (source / "module.py").write_text("code = 1\n")
    (tmp_path / "file.txt").write_text("notes\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(data)
    other = tmp_path / "other-version"
    shutil.copytree(data, other)
    (other / "meta.json").write_text(json.dumps({"format_version": 99}))
    cases = {
        source: r"is a directory that is not a dataset \(it holds module\.py\)",
        tmp_path / "file.txt": r"is a regular file, not a dataset directory",
        tmp_path / "fifo": r"is a special file, not a dataset directory",
        tmp_path / "link": r"is a symlink, not a dataset directory",
        other: r"is not a dataset this rlcore wrote \(.*format version 99",
    }
    before = snapshot(tmp_path)
    for path, message in cases.items():
        with pytest.raises(DatasetError, match=message):
            save_dataset(path, buffer_of(4), source={})
    assert snapshot(tmp_path) == before
    assert {p.name for p in tmp_path.iterdir()} == {"rlcore", "file.txt", "fifo", "link"} | {
        "other-version",
        "data",
    }
    check_replaceable(data)  # ours: replaced as before
    save_dataset(data, buffer_of(4), source={})
    assert len(load_dataset(data, "cpu", torch.Generator())) == 4


def test_a_failed_write_leaves_the_previous_dataset_and_no_temporary(data, monkeypatch):
    def full(path, payload):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rlcore.dataset_writing, "_write_file", full)
    before = snapshot(data)
    with pytest.raises(DatasetError) as err:
        save_dataset(data, buffer_of(4), source={})
    assert str(err.value) == (
        f"disk full while writing dataset {data}: previous dataset intact (No space left on device)"
    )
    assert snapshot(data) == before
    assert [p.name for p in data.parent.iterdir()] == ["data"]


def test_a_file_size_limit_is_a_disk_full_line_not_a_signal(data):
    # RLIMIT_FSIZE stands in for a full disk: writes past it fail with EFBIG (SIGXFSZ ignored,
    # as Python does), as they fail with ENOSPC on a full filesystem.
    code = (
        "import resource, signal, sys, torch\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))\n"
        "from rlcore.datasets import DatasetError, save_dataset\n"
        "from rlcore.replay import ReplayBuffer\n"
        "buffer = ReplayBuffer(4096, 12, (1,), torch.float32, 'cpu', torch.Generator())\n"
        "buffer.add(buffer.storage.clone())  # 4,096 rows: obs.memmap alone is 196,608 bytes\n"
        "try:\n"
        "    save_dataset(sys.argv[1], buffer, source={})\n"
        "except DatasetError as exc:\n"
        "    sys.exit(str(exc))\n"
    )
    before = snapshot(data)
    done = subprocess.run(
        [sys.executable, "-c", code, str(data)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"disk full while writing dataset {data}: previous dataset intact (File too large)"
    )
    assert snapshot(data) == before
    assert [p.name for p in data.parent.iterdir()] == ["data"]


def test_an_interrupted_save_is_cleaned_up_by_the_next_run(tmp_path, data):
    stale = tmp_path / ".data.k3j2.tmp"
    (stale / "transitions").mkdir(parents=True)
    (stale / "transitions" / "obs.memmap").write_bytes(b"\0" * 8)
    foreign = tmp_path / ".data.mine.tmp"  # named like ours, but holds someone's file
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep\n")
    shutil.copytree(data, tmp_path / ".data.old")
    assert sorted(remove_interrupted_saves(data)) == [
        tmp_path / ".data.k3j2.tmp",
        tmp_path / ".data.old",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".data.mine.tmp", "data"]


def test_a_save_interrupted_between_its_renames_gets_its_dataset_back(tmp_path, data):
    before = snapshot(data)
    data.rename(tmp_path / ".data.old")  # the previous dataset, moved aside; then killed
    assert remove_interrupted_saves(data) == []
    assert snapshot(data) == before and not (tmp_path / ".data.old").exists()


@pytest.fixture
def camera_data(tmp_path):
    """A format-2 dataset: 16 transitions of a uint8 image [3, 4, 4] and a state [2]."""
    spec = {"image": ObsEntry((3, 4, 4), torch.uint8), "state": ObsEntry((2,), torch.float32)}
    buffer = ReplayBuffer(16, spec, (1,), torch.float32, "cpu", torch.Generator())
    buffer.add(buffer.storage.clone())
    save_dataset(tmp_path / "camera", buffer, source={})
    assert json.loads((tmp_path / "camera" / "meta.json").read_text())["format_version"] == 2
    return tmp_path / "camera"


@pytest.fixture
def opened(monkeypatch):
    """Every path the dataset module opens for reading."""
    paths = []
    real = rlcore.dataset_format._open_regular

    def spy(path):
        paths.append(Path(path).name)
        return real(path)

    # meta.json is opened by the format module, the columns by the loading one
    monkeypatch.setattr(rlcore.dataset_format, "_open_regular", spy)
    monkeypatch.setattr(rlcore.datasets, "_open_regular", spy)
    return paths


@pytest.mark.parametrize("name", ["../x", "a/b", "/etc/passwd", "..", "a.b", "", "x" * 65])
def test_an_entry_name_that_could_name_another_path_is_refused(camera_data, opened, name):
    load_dataset(camera_data, "cpu", torch.Generator())  # intact: the spy sees every file
    columns = {p.name for p in (camera_data / "transitions").iterdir()}
    assert len(columns) == 8 and set(opened) == {"meta.json", *columns}
    opened.clear()
    meta = json.loads((camera_data / "meta.json").read_text())
    meta["obs"] = {name: meta["obs"]["image"], "state": meta["obs"]["state"]}
    (camera_data / "meta.json").write_text(json.dumps(meta))
    before = snapshot(camera_data.parent)
    with pytest.raises(DatasetError) as err:
        load_dataset(camera_data, "cpu", torch.Generator())
    assert str(err.value) == (
        f"dataset {camera_data}: meta.json is missing or damaged (obs entry name "
        f"{name[:70]!r} is not [A-Za-z0-9_]{{1,64}})"
    )
    assert opened == ["meta.json"]  # nothing but meta.json was read
    assert snapshot(camera_data.parent) == before


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "bool", "int8", "qint8", "x"])
def test_an_entry_dtype_observations_are_not_stored_in_is_refused(camera_data, opened, dtype):
    meta = json.loads((camera_data / "meta.json").read_text())
    meta["obs"]["image"]["dtype"] = dtype
    (camera_data / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        DatasetError,
        match=rf"meta\.json is missing or damaged \(obs entry 'image' has dtype '{dtype}': "
        r"one of \['float32', 'uint8'\]\)",
    ):
        load_dataset(camera_data, "cpu", torch.Generator())
    assert opened == ["meta.json"]


STATE = {"shape": [2], "dtype": "float32"}  # camera_data's state entry, as meta.json holds it


@pytest.mark.parametrize(
    ("obs", "message"),
    [
        ({}, r"obs must name at least one entry"),
        ([], r"obs must name at least one entry"),
        ({"image": {"shape": [3, 4, 4, 1], "dtype": "uint8"}}, r"1 to 3 positive sizes"),
        ({"image": {"shape": [3, 0, 4], "dtype": "uint8"}}, r"1 to 3 positive sizes"),
        (
            {"image": {"shape": [10**15], "dtype": "uint8"}, "state": STATE},
            r"obs\.image\.memmap holds 768 bytes, meta\.json implies 16,000,000,000,000,000",
        ),
        ({"image": {"dtype": "uint8"}}, r"meta\.json is missing or damaged \('shape'\)"),
    ],
)
def test_a_format_2_obs_field_is_checked_before_any_allocation(camera_data, obs, message):
    meta = json.loads((camera_data / "meta.json").read_text())
    (camera_data / "meta.json").write_text(json.dumps(meta | {"obs": obs}))
    with pytest.raises(DatasetError, match=message):
        load_dataset(camera_data, "cpu", torch.Generator())
