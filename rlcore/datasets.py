"""Offline datasets on disk: a directory DVC can track, loaded as a filled ReplayBuffer.

The format (`meta.json`, `transitions/`) is `rlcore.dataset_format`; writing, and replacing
only our own datasets, `rlcore.dataset_writing`; this module loads, and names them all.

A dataset is shared data, never code: loading reads only the raw files that our own
`meta.json` and the replay buffer's schema name, with sizes checked before reading, through
read-only file descriptors. Nothing in `transitions/` chooses a code path (tensordict's
metadata is never read, nothing is unpickled) and any file there that is not ours is refused.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Any

import torch
from tensordict import TensorDict

from rlcore.dataset_format import (
    DTYPES,
    FLAT_FORMAT,
    FORMAT_VERSION,
    FORMATS,
    MAX_META_BYTES,
    META,
    OBS_DTYPES,
    SUFFIX,
    TRANSITIONS,
    DatasetError,
    _column_name,
    _dtype_name,
    _open_regular,
    _row_bytes,
    check_dataset_fits,
    read_meta,
)
from rlcore.dataset_writing import check_replaceable, remove_interrupted_saves, save_dataset
from rlcore.observations import FLAT_KEY
from rlcore.replay import NEXT_OBS, ReplayBuffer, leaves
from rlcore.rollout import OBS

__all__ = [
    "DTYPES",
    "FLAT_FORMAT",
    "FORMATS",
    "FORMAT_VERSION",
    "MAX_META_BYTES",
    "META",
    "OBS_DTYPES",
    "SUFFIX",
    "TRANSITIONS",
    "DatasetError",
    "check_dataset_fits",
    "check_replaceable",
    "load_dataset",
    "read_meta",
    "remove_interrupted_saves",
    "save_dataset",
]

_READ_CHUNK_BYTES = 64 << 20  # rows are read and copied to the device this many at a time


def load_dataset(
    path: str | Path, device: torch.device | str, generator: torch.Generator
) -> ReplayBuffer:
    """A full ReplayBuffer (capacity = the dataset's size) holding the dataset, on `device`.

    Reads only; every file's size is checked against `meta.json` before anything is read.
    """
    path = Path(path)
    meta = read_meta(path)
    if meta["transitions"] <= 0:
        raise DatasetError(f"dataset {path}: {META} says it holds no transitions")
    columns = _columns(meta)
    folder = path / TRANSITIONS
    _check_entries(path, folder, columns)
    with contextlib.ExitStack() as stack:
        handles = {}
        for key, (shape, dtype) in columns.items():
            handles[key] = _open_column(path, key, meta["transitions"], shape, dtype)
            stack.callback(handles[key].close)
        buffer = _new_buffer(meta, device, generator)
        row_bytes = sum(_row_bytes(shape, dtype) for shape, dtype in columns.values())
        chunk = max(1, _READ_CHUNK_BYTES // row_bytes)
        for start in range(0, meta["transitions"], chunk):
            count = min(chunk, meta["transitions"] - start)
            rows = {
                key: _read_rows(path, key, handles[key], count, *columns[key]) for key in columns
            }
            flat = meta["format_version"] == FLAT_FORMAT
            buffer.add(TensorDict(_nest(rows, flat), batch_size=[count]))
    return buffer


def _new_buffer(
    meta: dict[str, Any], device: torch.device | str, generator: torch.Generator
) -> ReplayBuffer:
    return ReplayBuffer(
        meta["transitions"],
        meta["obs_spec"],
        tuple(meta["action_shape"]),
        getattr(torch, meta["action_dtype"]),
        device,
        generator,
        with_success=meta["with_success"],
    )


def _columns(meta: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Per column file, the shape of one row and the dtype: the replay buffer's own schema,
    taken from a buffer on the meta device (nothing allocated, whatever meta.json claims)."""
    schema = _new_buffer(meta | {"transitions": 1}, "meta", torch.Generator())
    flat = meta["format_version"] == FLAT_FORMAT
    return {
        _column_name(key, flat): (tuple(col.shape[1:]), col.dtype)
        for key, col in leaves(schema.storage)
    }


def _nest(rows: dict[str, torch.Tensor], flat: bool) -> dict[str, Any]:
    """Columns by file stem as the replay buffer's nested keys."""
    nested: dict[str, Any] = {OBS: {}, NEXT_OBS: {}}
    for name, value in rows.items():
        head, _, entry = name.partition(".")
        if head in nested:
            nested[head][FLAT_KEY if flat else entry] = value
        else:
            nested[name] = value
    return nested


def _check_entries(path: Path, folder: Path, columns: dict[str, Any]) -> None:
    """Exactly our files in `transitions/` (tensordict's meta.json allowed, never read)."""
    if folder.is_symlink() or not folder.is_dir():
        raise DatasetError(f"dataset {path}: {TRANSITIONS}/ is missing or not a directory")
    expected = {f"{key}{SUFFIX}" for key in columns}
    try:
        entries = set(os.listdir(folder))
    except OSError as exc:
        raise DatasetError(f"dataset {path}: {TRANSITIONS}/ cannot be read ({exc})") from None
    unexpected, missing = sorted(entries - expected - {META}), sorted(expected - entries)
    if unexpected:
        raise DatasetError(
            f"dataset {path}: {TRANSITIONS}/{unexpected[0]} is not part of a dataset of this "
            f"shape (expected {', '.join(sorted(expected))}); nothing was loaded"
        )
    if missing:
        raise DatasetError(f"dataset {path}: {TRANSITIONS}/{missing[0]} is missing")


def _open_column(
    path: Path, key: str, transitions: int, shape: tuple[int, ...], dtype: torch.dtype
) -> IO[bytes]:
    """The column's file, open read-only, once its size is what `meta.json` implies."""
    name = f"{TRANSITIONS}/{key}{SUFFIX}"
    try:
        handle = _open_regular(path / TRANSITIONS / f"{key}{SUFFIX}")
    except OSError as exc:
        raise DatasetError(f"dataset {path}: {name} cannot be read ({exc.strerror})") from None
    size, expected = os.fstat(handle.fileno()).st_size, transitions * _row_bytes(shape, dtype)
    if size != expected:
        handle.close()
        raise DatasetError(
            f"dataset {path}: {name} holds {size:,d} bytes, {META} implies {expected:,d} "
            f"({transitions:,d} rows of {_dtype_name(dtype)} {list(shape)})"
        )
    return handle


def _read_rows(
    path: Path, key: str, handle: IO[bytes], count: int, shape: tuple[int, ...], dtype: torch.dtype
) -> torch.Tensor:
    """The next `count` rows of a column, read (never mapped) into a new CPU tensor."""
    raw = torch.empty(count * _row_bytes(shape, dtype), dtype=torch.uint8)
    view, done = memoryview(raw.numpy()), 0
    while done < len(view):
        got = handle.readinto(view[done:])
        if not got:
            raise DatasetError(f"dataset {path}: {TRANSITIONS}/{key}{SUFFIX} shrank while read")
        done += got
    if dtype == torch.bool:  # any nonzero byte is true, as numpy and torch agree
        return raw.ne(0).reshape(count, *shape)
    return raw.view(dtype).reshape(count, *shape)
