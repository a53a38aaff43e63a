"""Atomic file writes: a stage that fails or is interrupted never leaves half a file behind.

A stage with several outputs stages them (`StagedOutputs`): each is written to a temporary
beside its target (`.<name>.<random>.tmp<suffix>`) and all are renamed into place together once
every one is written, so a failure leaves either all the old outputs or all the new ones.
Temporaries a killed run left behind are removed on the next run.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)


class OutputError(RuntimeError):
    """A stage output cannot be written (the message names the path and what to do)."""


def _temporary(path: Path) -> Path:
    """A new empty temporary beside `path`, named so `remove_stale_temporaries` knows it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The target's suffix last: writers that pick a format by it (imageio) still can.
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}"
    )
    os.close(fd)
    return Path(tmp)


_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[^./]+\.tmp(\.[^./]*)?")


def shown_output(path: str | Path) -> str:
    """`path` as a user should read it: the output a temporary of ours stands for, relative
    to the working directory (the project root) where it lies inside it."""
    path = Path(path)
    if match := _TEMPORARY.fullmatch(path.name):
        path = path.with_name(match["name"])
    with contextlib.suppress(ValueError):
        path = path.absolute().relative_to(Path.cwd())
    return str(path)


def _publish(tmp: Path, path: Path) -> None:
    # mkstemp creates 0600 files; outputs are for everyone who may read the project.
    os.chmod(tmp, 0o666 & ~_UMASK)
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; it replaces `path` only if the block succeeds."""
    tmp = _temporary(path)
    try:
        with naming(path):
            yield tmp
        _publish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError of a write to `path` (or its temporary) names `path`, so a full disk
    says which output it stopped."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def check_writable(path: Path, directory: bool = False) -> None:
    """Fail with one line, before any compute, if the output `path` (a file, or with
    `directory` a directory the stage replaces as a whole) cannot be replaced.

    Creates nothing: the nearest existing ancestor must be a writable directory (the stage
    creates what is missing when it writes).
    """
    if path.is_dir() and not directory:
        raise OutputError(f"{path}: is a directory where the stage writes a file; remove it")
    if directory and path.exists() and not path.is_dir():
        raise OutputError(f"{path}: is a file where the stage writes a directory; remove it")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{folder}: is a file where the stage needs a directory; remove it")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(
            f"{folder}: not writable, so {path.name} cannot be written; fix the directory's "
            f"permissions (nothing was run)"
        )


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove temporaries of `path` left by an interrupted write (ours: `.<name>.*.tmp*`)."""
    if not path.parent.is_dir():
        return []
    stale = [p for p in path.parent.glob(f".{path.name}.*.tmp*") if p.is_file()]
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


class StagedOutputs:
    """A stage's outputs, replaced all together or not at all.

    Created before the stage's work: checks every target can be written and removes stale
    temporaries. `path(target)` gives the temporary to write `target` to; leaving the `with`
    block normally renames every temporary onto its target, and an exception deletes them,
    leaving the previous outputs as they were. (The renames are separate system calls: only
    a crash between them could mix old and new, and each file is whole either way.)
    """

    def __init__(self, targets: Sequence[Path], directories: Sequence[Path] = ()) -> None:
        self.targets = list(targets)
        self._temporaries: dict[Path, Path] = {}
        self._directories: dict[Path, Path] = {}
        for target in self.targets:
            check_writable(target)
            remove_stale_temporaries(target)
        for target in directories:
            check_writable(target, directory=True)
            self._directories[target] = target  # until `stage_directory` names its source

    def stage_directory(self, target: Path, source: Path) -> None:
        """Publish the directory `source` as `target` (a directory output named when this
        was created) with the other outputs; `source` is moved, `target` replaced whole."""
        if target not in self._directories:
            raise ValueError(f"{target} is not one of this stage's directory outputs")
        self._directories[target] = source

    def path(self, target: Path) -> Path:
        if target not in self.targets:
            raise ValueError(f"{target} is not one of this stage's outputs {self.targets}")
        if target not in self._temporaries:
            self._temporaries[target] = _temporary(target)
        return self._temporaries[target]

    def write_text(self, target: Path, text: str) -> None:
        with naming(target):
            self.path(target).write_text(text)

    def write_json(self, target: Path, data: dict[str, Any]) -> None:
        self.write_text(target, _json_text(data))

    def write_csv(
        self, target: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]
    ) -> None:
        with naming(target):
            _dump_csv(self.path(target), columns, rows)

    def __enter__(self) -> StagedOutputs:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                missing = [t for t in self.targets if t not in self._temporaries]
                missing += [t for t, source in self._directories.items() if source == t]
                if missing:
                    raise ValueError(f"outputs never written: {missing}")
                for target, tmp in self._temporaries.items():
                    _publish(tmp, target)
                for target, source in self._directories.items():
                    replace_directory(source, target)
        finally:
            for tmp in self._temporaries.values():
                tmp.unlink(missing_ok=True)


def replace_directory(source: Path, target: Path) -> None:
    """Move the directory `source` to `target`, replacing what was there: the old one is
    renamed aside first and removed once the new one is in place (back if the move fails)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    old = target.with_name(f".{target.name}.old.tmp")
    shutil.rmtree(old, ignore_errors=True)
    replacing = target.exists()
    if replacing:
        target.rename(old)
    try:
        try:
            source.rename(target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copytree(source, target)  # another file system: copy, then drop it
            shutil.rmtree(source)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        if replacing:
            old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_text(path, _json_text(data))


def require(path: Path, produced_by: str) -> Path:
    """A stage input; when missing, the error says which stage makes it."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run the `{produced_by}` stage first")
    return path


def _dump_csv(path: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_csv(path: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp:
        _dump_csv(tmp, columns, rows)
