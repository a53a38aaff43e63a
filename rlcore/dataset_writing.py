"""Writing an offline dataset (`rlcore.dataset_format`) and replacing only our own.

A dataset is written beside its final path with ordinary writes (a full disk is an OSError,
not a SIGBUS from a mapped page) and renamed into place once complete, so an interrupted
write never leaves a half dataset where a complete one is expected. Only a directory that
is one of our datasets is ever replaced.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from rlcore.dataset_format import (
    FLAT_FORMAT,
    FORMAT_VERSION,
    META,
    SUFFIX,
    TRANSITIONS,
    DatasetError,
    _column_name,
    _dtype_name,
    _row_bytes,
    read_meta,
)
from rlcore.errors import DISK_FULL
from rlcore.observations import FLAT_KEY, ObsEntry, is_flat
from rlcore.replay import TransitionSource, leaves
from rlcore.rollout import OBS

_WRITE_CHUNK_BYTES = 64 << 20  # rows are gathered to the host and written this many at a time


def save_dataset(path: str | Path, buffer: TransitionSource, source: dict[str, Any]) -> None:
    """Write the buffer's transitions (oldest first, `next_obs` explicit) as a dataset at `path`.

    `path` must be new or one of our datasets (`check_replaceable`); a disk that fills up
    raises `DatasetError` and leaves the previous dataset as it was.
    """
    path = Path(path)
    if len(buffer) == 0:
        raise ValueError(f"cannot save dataset {path}: the replay buffer is empty")
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = buffer.empty_batch(0)
    spec = {str(key): ObsEntry(tuple(v.shape[1:]), v.dtype) for key, v in schema[OBS].items()}
    flat = is_flat(spec)
    action = schema["action"]
    meta: dict[str, Any] = {
        "format_version": FLAT_FORMAT if flat else FORMAT_VERSION,
        "transitions": len(buffer),
        "action_shape": list(action.shape[1:]),
        "action_dtype": _dtype_name(action.dtype),
        "with_success": "success" in schema,
        "source": source,
    }
    if flat:
        meta["obs_dim"] = spec[FLAT_KEY].shape[0]
    else:
        meta["obs"] = {
            key: {"shape": list(entry.shape), "dtype": _dtype_name(entry.dtype)}
            for key, entry in spec.items()
        }
    with _disk_full_is_one_line(path):
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
        try:
            _write_transitions(tmp / TRANSITIONS, buffer, flat)
            _write_file(tmp / META, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
            tmp.chmod(0o755)
            _replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _disk_full_is_one_line(path: Path) -> Iterator[None]:
    """A full disk (or quota, or file size limit) while saving `path`: a `DatasetError`."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        kept = "previous dataset intact" if path.exists() else "nothing written"
        raise DatasetError(
            f"disk full while writing dataset {path}: {kept} ({exc.strerror})"
        ) from None


def _replace(tmp: Path, path: Path) -> None:
    """Rename the complete dataset `tmp` onto `path`, putting the old one back on failure."""
    old = _old(path)
    replacing = path.exists()
    if replacing:
        _remove_if_ours(old)
        path.rename(old)
    try:
        tmp.rename(path)
    except OSError:
        if replacing:
            old.rename(path)
        raise
    _remove_if_ours(old)


def _old(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def _write_transitions(folder: Path, buffer: TransitionSource, flat: bool) -> None:
    """One raw file per column, appended chunk by chunk (a buffer that stores each
    observation once materialises `next_obs` chunk by chunk), and (format 1, `flat`)
    tensordict's metadata so its `load_memmap` reads them."""
    folder.mkdir()
    schema = {_column_name(key, flat): c for key, c in leaves(buffer.empty_batch(0))}
    row_bytes = sum(_row_bytes(c.shape[1:], c.dtype) for c in schema.values())
    with contextlib.ExitStack() as stack:
        files = {key: stack.enter_context((folder / f"{key}{SUFFIX}").open("wb")) for key in schema}
        for rows in buffer.chunks(max(1, _WRITE_CHUNK_BYTES // row_bytes)):
            for key, column in leaves(rows.cpu()):
                data = column.contiguous().reshape(-1).view(torch.uint8).numpy()
                files[_column_name(key, flat)].write(memoryview(data))
        for handle in files.values():
            handle.flush()
            os.fsync(handle.fileno())  # a full disk some filesystems report only here
    if not flat:
        return
    n, cpu = len(buffer), {"device": "cpu"}
    td_meta: dict[str, Any] = {
        key: cpu | {"shape": [n, *c.shape[1:]], "dtype": str(c.dtype), "is_nested": False}
        for key, c in schema.items()
    }
    td_meta |= cpu | {"shape": [n], "_type": "<class 'tensordict._td.TensorDict'>"}
    td_meta |= {"_format_version": 1, "_class": "tensordict:TensorDict"}
    _write_file(folder / META, json.dumps(td_meta).encode())


def _write_file(path: Path, data: bytes | memoryview) -> None:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())  # a full disk some filesystems report only here


def check_replaceable(path: str | Path) -> None:
    """Fail unless `path` is free or one of our datasets: saving replaces nothing else.

    Ours: a directory (not a symlink) holding exactly `meta.json` (our format version) and
    `transitions/`.
    """
    path = Path(path)
    if not os.path.lexists(path):
        return
    mode = path.lstat().st_mode
    if not stat.S_ISDIR(mode):
        raise DatasetError(
            f"{path} is {_kind(mode)}, not a dataset directory; a dataset replaces only a "
            "dataset: choose another path"
        )
    entries = sorted(os.listdir(path))
    if entries != [META, TRANSITIONS] or not (path / TRANSITIONS).is_dir():
        raise DatasetError(
            f"{path} is a directory that is not a dataset (it holds "
            f"{', '.join(entries[:5]) or 'nothing'}{', ...' if len(entries) > 5 else ''}); "
            "a dataset replaces only a dataset: choose another path or remove it yourself"
        )
    try:
        read_meta(path)
    except DatasetError as exc:
        raise DatasetError(
            f"{path} is not a dataset this rlcore wrote ({exc}); choose another path or "
            "remove it yourself"
        ) from None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a special file"


def remove_interrupted_saves(path: str | Path) -> list[Path]:
    """Remove what an interrupted `save_dataset` of `path` left beside it; return them.

    Only directories named as ours (`.<name>.*.tmp`, `.<name>.old`) that hold nothing but
    dataset entries. A `.<name>.old` without `path` is the previous dataset of a save
    interrupted between its two renames: it is put back instead. Call it before saving, not
    beside another save of the same `path`: that save's temporary would go too.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    old = _old(path)
    if _holds_only_dataset_entries(old) and not os.path.lexists(path):
        old.rename(path)
    pattern = f".{glob.escape(path.name)}.*.tmp"
    candidates = [*path.parent.glob(pattern), old]
    stale = [p for p in candidates if _holds_only_dataset_entries(p)]
    for folder in stale:
        shutil.rmtree(folder)
    return stale


def _holds_only_dataset_entries(folder: Path) -> bool:
    if folder.is_symlink() or not folder.is_dir():
        return False
    return set(os.listdir(folder)) <= {META, TRANSITIONS}


def _remove_if_ours(folder: Path) -> None:
    if _holds_only_dataset_entries(folder):
        shutil.rmtree(folder, ignore_errors=True)  # what stays, the next collect removes
