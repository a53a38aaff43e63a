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

import os
from pathlib import Path

import optuna

LOCK_SUFFIX = ".lock"  # Optuna's name for the lock beside the journal, for either lock kind


def journal_storage(path: Path) -> optuna.storages.BaseStorage:
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage

    path = path.absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = JournalFileOpenLock(str(path))
    return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))


def recover_journal(path: Path) -> list[str]:
    """Remove a stale lock and a torn last write; return one line per repair made."""
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
