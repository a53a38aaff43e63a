"""The on-disk format of an offline dataset: its layout, `meta.json` read and checked.

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

Writing is `rlcore.dataset_writing`, loading `rlcore.datasets` (which re-exports both).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import IO, Any

import torch

from rlcore.errors import ConfigError
from rlcore.observations import FLAT_KEY, ObsEntry, ObsSpec, describe, is_flat

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


class DatasetError(ConfigError):
    """A dataset directory is missing, damaged or does not fit the env."""


def _column_name(key: str | tuple[str, ...], flat: bool) -> str:
    """A storage key's file stem: `action`; `obs.image` (format 2) or `obs` (a flat env's
    format 1)."""
    if isinstance(key, str):
        return key
    return key[0] if flat else ".".join(key)


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


def _row_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return torch.Size(shape).numel() * dtype.itemsize
