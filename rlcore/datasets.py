"""Offline datasets on disk: a directory DVC can track, loaded as a filled ReplayBuffer.

Layout of a dataset directory:

    meta.json     format version, transitions, obs_dim, action shape and dtype, success
                  flag, and `source` (what collected it: env, policy, returns, ...)
    transitions/  tensordict's memory-mapped format (`TensorDict.memmap`): one raw file
                  per key (the `rlcore.replay` keys), readable without unpickling

A dataset is written beside its final path and renamed into place once complete, so an
interrupted write never leaves a half dataset where a complete one is expected.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.errors import ConfigError
from rlcore.replay import ReplayBuffer

FORMAT_VERSION = 1
META = "meta.json"
TRANSITIONS = "transitions"


class DatasetError(ConfigError):
    """A dataset directory is missing, damaged or does not fit the env."""


def save_dataset(path: str | Path, buffer: ReplayBuffer, source: dict[str, Any]) -> None:
    """Write the buffer's filled transitions (oldest first) as a dataset directory at `path`."""
    path = Path(path)
    if len(buffer) == 0:
        raise ValueError(f"cannot save dataset {path}: the replay buffer is empty")
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = buffer.storage
    start = buffer.cursor if buffer.size == buffer.capacity else 0
    order = torch.arange(start, start + buffer.size, device=buffer.device) % buffer.capacity
    rows = storage[order].cpu()
    action = storage["action"]
    meta = {
        "format_version": FORMAT_VERSION,
        "transitions": buffer.size,
        "obs_dim": int(storage["obs"].shape[1]),
        "action_shape": list(action.shape[1:]),
        "action_dtype": str(action.dtype).removeprefix("torch."),
        "with_success": "success" in storage,
        "source": source,
    }
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        rows.memmap(tmp / TRANSITIONS)
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        tmp.chmod(0o755)
        old = path.with_name(f".{path.name}.old")
        replacing = path.exists()
        if replacing:
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
        try:
            tmp.rename(path)
        except OSError:
            if replacing:  # put the previous dataset back where it was
                old.rename(path)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_meta(path: str | Path) -> dict[str, Any]:
    """The dataset's `meta.json`; `DatasetError` naming the path if it cannot be read."""
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(
            f"replay.offline.path: dataset {path} does not exist (collect one with "
            "`dvc repro data/dvc.yaml` or `python -m pipelines collect`)"
        )
    try:
        meta = json.loads((path / META).read_text())
        meta["transitions"], meta["obs_dim"] = int(meta["transitions"]), int(meta["obs_dim"])
        meta["action_shape"] = [int(n) for n in meta["action_shape"]]
        if not isinstance(getattr(torch, meta["action_dtype"], None), torch.dtype):
            raise ValueError(f"action_dtype {meta['action_dtype']!r} is no torch dtype")
        meta["with_success"] = bool(meta["with_success"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"dataset {path}: {META} is missing or damaged ({exc})") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            f"dataset {path}: format version {meta.get('format_version')!r}, this rlcore "
            f"reads {FORMAT_VERSION}"
        )
    return meta


def check_dataset_fits(
    path: str | Path, obs_dim: int, action_shape: tuple[int, ...], action_dtype: torch.dtype
) -> dict[str, Any]:
    """Read only `meta.json` and fail, naming the field, if the dataset cannot feed this env."""
    meta = read_meta(path)
    dtype = str(action_dtype).removeprefix("torch.")
    problems = []
    if meta["obs_dim"] != obs_dim:
        problems.append(f"obs has shape [{meta['obs_dim']}] but the env's is [{obs_dim}]")
    if tuple(meta["action_shape"]) != tuple(action_shape) or meta["action_dtype"] != dtype:
        problems.append(
            f"action is {meta['action_dtype']} {list(meta['action_shape'])} but the env's is "
            f"{dtype} {list(action_shape)}"
        )
    if meta["transitions"] <= 0:
        problems.append("it holds no transitions")
    if problems:
        raise DatasetError(f"replay.offline.path: dataset {path}: {'; '.join(problems)}")
    return meta


def load_dataset(
    path: str | Path, device: torch.device | str, generator: torch.Generator
) -> ReplayBuffer:
    """A full ReplayBuffer (capacity = the dataset's size) holding the dataset, on `device`."""
    path = Path(path)
    meta = read_meta(path)
    try:
        rows = TensorDict.load_memmap(path / TRANSITIONS)
    except Exception as exc:  # tensordict raises several types for damaged directories
        raise DatasetError(f"dataset {path}: {TRANSITIONS}/ cannot be read ({exc})") from exc
    if rows.batch_size[0] != meta["transitions"]:
        raise DatasetError(
            f"dataset {path}: {META} says {meta['transitions']} transitions, the data holds "
            f"{rows.batch_size[0]}"
        )
    buffer = ReplayBuffer(
        meta["transitions"],
        meta["obs_dim"],
        tuple(meta["action_shape"]),
        getattr(torch, meta["action_dtype"]),
        device,
        generator,
        with_success=meta["with_success"],
    )
    _check_rows_fit(path, rows, buffer)
    buffer.add(rows)
    return buffer


def _check_rows_fit(path: Path, rows: TensorDict, buffer: ReplayBuffer) -> None:
    """The stored columns are the ones `meta.json` describes; the error names the key."""
    keys, expected = set(rows.keys()), set(buffer.storage.keys())
    if keys != expected:
        raise DatasetError(
            f"dataset {path}: {TRANSITIONS}/ holds {sorted(keys)}, {META} describes "
            f"{sorted(expected)}"
        )
    for key, column in buffer.storage.items():
        stored = rows[key]
        if stored.shape[1:] != column.shape[1:] or stored.dtype != column.dtype:
            raise DatasetError(
                f"dataset {path}: {key} is stored as {stored.dtype} {list(stored.shape[1:])} "
                f"but {META} says {column.dtype} {list(column.shape[1:])}"
            )
