"""The search study's default storage: Optuna's journal file, and its repair after a kill.

A worker killed while it appends to the journal (SIGKILL, out of memory, a lost machine)
can leave two things behind, and Optuna recovers from neither on its own:

- its lock file. Optuna's default symlink lock, given a relative journal path, is a
  dangling link whose age it cannot read, so every later process spins on it forever.
  We use the open-file lock on an absolute path instead: a stale lock is then a plain
  file, which Optuna force-releases after its 30 s grace period.
- a torn last line. Optuna appends the next operation onto it, and the journal no longer
  parses once anything follows: the whole study becomes unloadable.

`recover_journal` removes both. It is safe only when no other process uses the journal,
which is when a search starts (not `--join`): the same moment the study's orphaned
RUNNING trials are failed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna

from pipelines.files import OutputError

LOCK_SUFFIX = ".lock"  # Optuna's name for the lock beside the journal, for either lock kind
_FIRST_LINE_BYTES = 1 << 20  # a journal's first operation (create_study) is a few hundred
_OPERATION = b'{"op_code":'  # how Optuna begins every line of a journal


def check_journal(path: Path) -> None:
    """Refuse (`OutputError`, one line) to take over a path that is not a journal: Optuna
    appends to the file and `recover_journal` trims it, so `search.storage` naming any other
    file (a colleague's typo, `params.yaml`) would damage it. New and empty files are fine."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputError(
            f"search.storage: {path} is not a regular file; name a journal file (nothing was "
            "changed)"
        )
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb") as handle:
        first = handle.readline(_FIRST_LINE_BYTES)
    cut_short = not first.endswith(b"\n")  # the first write: Optuna's line begins so
    if cut_short and (_OPERATION.startswith(first) or first.startswith(_OPERATION)):
        return
    try:
        operation = json.loads(first)
    except ValueError:
        operation = None
    if not isinstance(operation, dict) or "op_code" not in operation:
        raise OutputError(
            f"search.storage: {path} exists and is not an Optuna journal; name a new file or "
            "a study's journal (nothing was changed)"
        )


def journal_storage(path: Path) -> optuna.storages.BaseStorage:
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage

    check_journal(path)
    path = path.absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = JournalFileOpenLock(str(path))
    return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))


def recover_journal(path: Path) -> list[str]:
    """Remove a stale lock and a torn last write; return one line per repair made."""
    check_journal(path)
    repairs = []
    lock = Path(f"{path}{LOCK_SUFFIX}")
    if lock.is_symlink() or lock.exists():
        lock.unlink()
        repairs.append(f"removed the lock {lock} left by a stopped worker")
    if path.exists():
        torn = _torn_tail_bytes(path)
        if torn:
            with path.open("r+b") as f:
                f.truncate(path.stat().st_size - torn)
                f.flush()
                os.fsync(f.fileno())
            repairs.append(
                f"dropped a write a stopped worker left unfinished ({torn} bytes) from {path}"
            )
    return repairs


def _torn_tail_bytes(path: Path) -> int:
    """Bytes after the journal's last newline: an operation whose write never completed.

    Reads the whole file, as Optuna itself does when it opens the study.
    """
    data = path.read_bytes()
    return len(data) - (data.rfind(b"\n") + 1)
