"""Offline datasets on disk: a directory DVC can track, loaded as a filled ReplayBuffer.

Layout of a dataset directory:

    meta.json     format version, transitions, the observation (format 1: `obs_dim`, a
                  flat env's vector; format 2: `obs`, each named entry's shape and dtype),
                  action shape and dtype, success flag, and `source` (what collected it:
                  env, policy, returns, ...)
    transitions/  one raw little-endian file per column, `<column>.memmap` (the
                  `rlcore.replay` keys; format 2 names observation entries `obs.<entry>`
                  and `next_obs.<entry>`); format 1 adds the `meta.json` of tensordict's
                  memory-mapped format, so `TensorDict.load_memmap` reads it too

A flat env's dataset is written in format 1, as before named entries, so older rlcore
versions read it; one with several entries or images (uint8, stored as uint8) in format 2.

A dataset is shared data, never code: loading reads only the raw files that our own
`meta.json` and the replay buffer's schema name, with sizes checked before reading, through
read-only file descriptors. Nothing in `transitions/` chooses a code path (tensordict's
metadata is never read, nothing is unpickled) and any file there that is not ours is refused.

A dataset is written beside its final path with ordinary writes (a full disk is an OSError,
not a SIGBUS from a mapped page) and renamed into place once complete, so an interrupted
write never leaves a half dataset where a complete one is expected. Only a directory that
is one of our datasets is ever replaced.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import torch
from tensordict import TensorDict

from rlcore.errors import DISK_FULL, ConfigError
from rlcore.observations import FLAT_KEY, ObsEntry, ObsSpec, describe, is_flat
from rlcore.replay import NEXT_OBS, ReplayBuffer, TransitionSource, leaves
from rlcore.rollout import OBS

FLAT_FORMAT, FORMAT_VERSION = 1, 2  # what a flat env's dataset is written in; the newest
FORMATS = (FLAT_FORMAT, FORMAT_VERSION)
META = "meta.json"
TRANSITIONS = "transitions"
SUFFIX = ".memmap"
# A colleague's meta.json is read whole: far above any real one, far below harm.
MAX_META_BYTES = 1 << 20
# Action dtypes a dataset may hold: plain numbers, each read back by viewing its raw bytes.
_INTEGERS = ("bool", "uint8", "int8", "int16", "int32", "int64")
DTYPES = frozenset((*_INTEGERS, "float16", "bfloat16", "float32", "float64"))
OBS_DTYPES = {"float32": torch.float32, "uint8": torch.uint8}  # what `obs_spec` stores
# Entry names become file names: nothing that could name another path.
_ENTRY_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")
_READ_CHUNK_BYTES = 64 << 20  # rows are read and copied to the device this many at a time
_WRITE_CHUNK_BYTES = 64 << 20  # rows are gathered to the host and written this many at a time


class DatasetError(ConfigError):
    """A dataset directory is missing, damaged or does not fit the env."""


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


def _column_name(key: str | tuple[str, ...], flat: bool) -> str:
    """A storage key's file stem: `action`; `obs.image` (format 2) or `obs` (a flat env's
    format 1)."""
    if isinstance(key, str):
        return key
    return key[0] if flat else ".".join(key)


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


def read_meta(path: str | Path) -> dict[str, Any]:
    """The dataset's `meta.json`; `DatasetError` naming the path if it cannot be read."""
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(
            f"replay.offline.path: dataset {path} does not exist (collect one with "
            "`dvc repro data/dvc.yaml` or `python -m pipelines collect`)"
        )
    try:
        with _open_regular(path / META) as handle:
            text = handle.read(MAX_META_BYTES + 1)
        if len(text) > MAX_META_BYTES:
            raise ValueError(f"larger than {MAX_META_BYTES:,d} bytes")
        meta = json.loads(text)
        version = meta.get("format_version") if isinstance(meta, dict) else None
        if version in FORMATS:
            _check_fields(meta)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise DatasetError(f"dataset {path}: {META} is missing or damaged ({exc})") from None
    if version not in FORMATS:
        raise DatasetError(
            f"dataset {path}: format version {version!r}, this rlcore reads "
            f"{' and '.join(map(str, FORMATS))}"
        )
    return meta


def _check_fields(meta: dict[str, Any]) -> None:
    """Normalise meta.json's fields in place, adding `obs_spec`; ValueError, KeyError or
    TypeError if invalid."""
    meta["transitions"] = int(meta["transitions"])
    meta["action_shape"] = [int(n) for n in meta["action_shape"]]
    if meta["action_dtype"] not in DTYPES:
        raise ValueError(
            f"action_dtype {meta['action_dtype']!r} is no torch dtype a dataset holds (one of "
            f"{', '.join(sorted(DTYPES))})"
        )
    if meta["format_version"] == FLAT_FORMAT:
        meta["obs_dim"] = int(meta["obs_dim"])
        if meta["obs_dim"] < 1:
            raise ValueError("obs_dim and action_shape must be positive")
        meta["obs_spec"] = {FLAT_KEY: ObsEntry((meta["obs_dim"],), torch.float32)}
    else:
        meta["obs_spec"] = _obs_spec_of(meta["obs"])
    if any(n < 1 for n in meta["action_shape"]):
        raise ValueError("obs_dim and action_shape must be positive")
    meta["with_success"] = bool(meta["with_success"])


def _obs_spec_of(entries: Any) -> dict[str, ObsEntry]:
    """Format 2's `obs`: named entries, each a positive shape (at most 3 dims) and a dtype
    the platform stores observations in."""
    if not isinstance(entries, dict) or not entries:
        raise ValueError("obs must name at least one entry")
    spec = {}
    for key, entry in entries.items():
        if not _ENTRY_NAME.fullmatch(key):
            raise ValueError(f"obs entry name {key[:70]!r} is not [A-Za-z0-9_]{{1,64}}")
        shape = [int(n) for n in entry["shape"]]
        if not 1 <= len(shape) <= 3 or any(n < 1 for n in shape):
            raise ValueError(f"obs entry {key!r} has shape {shape}: 1 to 3 positive sizes")
        if entry["dtype"] not in OBS_DTYPES:
            raise ValueError(
                f"obs entry {key!r} has dtype {entry['dtype']!r}: one of {sorted(OBS_DTYPES)}"
            )
        spec[key] = ObsEntry(tuple(shape), OBS_DTYPES[entry["dtype"]])
    return spec


def _open_regular(path: Path) -> IO[bytes]:
    """Open `path` read-only; OSError unless it is a regular file (a FIFO never blocks)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return os.fdopen(fd, "rb")


def check_dataset_fits(
    path: str | Path, obs_spec: ObsSpec, action_shape: tuple[int, ...], action_dtype: torch.dtype
) -> dict[str, Any]:
    """Read only `meta.json` and fail, naming the field, if the dataset cannot feed this env."""
    meta = read_meta(path)
    dtype = _dtype_name(action_dtype)
    problems = []
    theirs, mine = meta["obs_spec"], dict(obs_spec)
    if theirs != mine:
        if is_flat(theirs) and is_flat(mine):
            problems.append(
                f"obs has shape {list(theirs[FLAT_KEY].shape)} but the env's is "
                f"{list(mine[FLAT_KEY].shape)}"
            )
        else:
            problems.append(f"obs is {describe(theirs)} but the env's is {describe(mine)}")
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


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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


def _row_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return torch.Size(shape).numel() * dtype.itemsize


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
