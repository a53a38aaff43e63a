"""Atomic checkpoint files, loaded with `weights_only=True`."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from rlcore.errors import CheckpointError


def config_hash(config: Any) -> str:
    """Stable short hash of a (dataclass) configuration, stored with each checkpoint."""
    return _hash(asdict(config) if is_dataclass(config) else config)


def _hash(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Configuration fields added since checkpoints were first written, by the release that added
# them, newest first: (section, field) -> default. A checkpoint written before a field
# existed was hashed without it, and a configuration that leaves the field at its default
# means what that checkpoint's did.
_ADDED_FIELDS: tuple[dict[tuple[str, str], Any], ...] = (
    {  # frame stacking; the auxiliary prediction
        ("env", "frame_stack"): 1,
        ("policy", "aux_obs"): (),
        ("policy", "aux_coef"): 1.0,
    },
    {  # named observation entries
        ("policy", "actor_obs"): None,
        ("policy", "critic_obs"): None,
        ("policy", "encoders"): {},
        ("policy", "image_features"): 256,
        ("policy", "share_image_encoder"): False,
        ("algo", "random_shift"): 0,
    },
)


def config_hashes(config: Any) -> tuple[str, ...]:
    """The hashes a checkpoint of `config` may carry: this release's (`config_hash`) first,
    then an earlier release's where every field added since is at its default."""
    payload = asdict(config) if is_dataclass(config) else config
    hashes = [_hash(payload)]
    older = json.loads(json.dumps(payload, default=str))  # a deep copy
    for added in _ADDED_FIELDS:
        for (section, name), default in added.items():
            fields = older.get(section)
            if isinstance(fields, dict) and name in fields:
                if fields[name] != json.loads(json.dumps(default)):
                    return tuple(hashes)  # no older release wrote this configuration
                del fields[name]
        hashes.append(_hash(older))
    return tuple(hashes)


# The process's umask (read once: reading it means setting it). Checkpoints get the mode
# every other file the user writes gets, not mkstemp's private 0600.
_UMASK = os.umask(0)
os.umask(_UMASK)


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write `state` to `path` atomically: a crash mid-write leaves the old file intact.

    The temporary is `.<name>.<random>.tmp` beside `path`; one a killed process left behind
    is safe to delete (the pipeline's stages do so on their next run).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            writer = _KeepWriteError(handle)
            try:
                torch.save(state, writer)
            except RuntimeError:  # torch reports a failed write as "unexpected pos ..."
                if writer.error is None:
                    raise
                error = writer.error  # the OSError itself: ENOSPC names the cause
                raise OSError(error.errno, error.strerror, str(path)) from None
            try:
                handle.flush()
                os.fsync(handle.fileno())
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
        os.chmod(tmp_name, 0o666 & ~_UMASK)
        os.replace(tmp_name, path)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


class _KeepWriteError:
    """The file `torch.save` writes to, keeping the OSError of a failed write (a full disk)
    that torch itself only reports as a position mismatch."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle: BinaryIO = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.handle.flush()


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; fail clearly if it is damaged."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several unrelated types for damaged files
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated and cannot be loaded "
            f"({_why_unloadable(exc)}); delete it or restore a good copy"
        ) from exc
    if not isinstance(state, dict) or "config_hash" not in state:
        raise CheckpointError(f"checkpoint {path} is not an rlcore checkpoint")
    return state


def _why_unloadable(exc: Exception) -> str:
    """torch's reason in one line. Its messages run to paragraphs, and for a file that is no
    checkpoint at all (the weights-only unpickler's error) they advise on `torch.load`'s
    options and filing an issue, which are not the user's to act on."""
    if isinstance(exc, pickle.UnpicklingError):
        return "not a checkpoint file, or one holding objects a checkpoint never holds"
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


_RANK_KEYS = ("env", "collector", "generator")  # per-rank entries of a checkpoint
# What a resumable checkpoint's layout is: 2 since named observation entries and the
# store-once replay buffer (1, or none: before them). Trained policies of any format load.
RESUME_FORMAT = 2


def read_resumable(path: Path, cfg: Any, world_size: int) -> dict[str, Any]:
    """A trainer checkpoint that a run of `cfg` with `world_size` processes can continue
    from, or a `CheckpointError` saying why not (another format, configuration or number
    of processes)."""
    state = load_checkpoint(path, map_location="cpu")
    written = state.pop("resume_format", 1)
    if written != RESUME_FORMAT:
        raise CheckpointError(
            f"checkpoint {path} was written by another rlcore (resume format {written}, "
            f"this one reads {RESUME_FORMAT}); its policy still loads for evaluation, "
            "but the run cannot continue from it: use a new run directory"
        )
    expected = config_hash(cfg)
    if state["config_hash"] not in config_hashes(cfg):
        raise CheckpointError(
            f"checkpoint {path} was written by a different configuration "
            f"(hash {state['config_hash']}, this run {expected}); use a new run directory"
        )
    if "ranks" not in state:  # written by a single process before ranks were stored
        state["ranks"] = [{key: state.pop(key) for key in _RANK_KEYS}]
    written_by = len(state["ranks"])
    if written_by != world_size:
        raise CheckpointError(
            f"checkpoint {path} was written by {written_by} process(es) and this run has "
            f"{world_size}: each rank continues its own envs, so resume with "
            f"{written_by} process(es) or use a new run directory"
        )
    return state


def to_cpu(value: Any) -> Any:
    """`value` with every tensor in its (nested) dicts and lists moved to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: to_cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(item) for item in value)
    return value


__all__ = [
    "RESUME_FORMAT",
    "CheckpointError",
    "config_hash",
    "load_checkpoint",
    "read_resumable",
    "save_checkpoint",
    "to_cpu",
]
