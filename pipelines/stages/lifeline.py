"""A stage process lives only as long as what started it, and one writer holds a run.

DVC runs a stage's command through a shell and nothing stops that command when `dvc repro`
is killed: an orphaned trainer would go on writing outputs DVC no longer tracks, and the
next `dvc repro` would start a second one on the same seed. So a stage run by DVC (or a
search worker, or the `dvc` a flow starts) ends when its parent does, and a trainer holds
a lock on its run directory that a second one reports instead of sharing.

Linux only for the kernel's part (`PR_SET_PDEATHSIG`); elsewhere a watcher thread notices
the parent's death within a second.
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import ctypes.util
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# A parent that is one of these ran the stage's command line for DVC; its own parent is
# the process whose death matters (a shell orphaned by `dvc`'s death would not exit).
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "busybox"})
POLL_S = 0.5
# A stop dropped inside a finalizer is sent again this long after (`_stops_not_dropped`).
RESEND_S = 0.05


# The parent of a stage run by DVC or of a search worker, noted as it starts (`hold_parent`).
_parent_at_start: int | None = None
# In the environment of the worker processes a search starts: the search's pid.
SEARCH_PID_ENV = "PIPELINES_SEARCH_PID"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (from a user, or because the parent died): stop like Ctrl-C does, so
    the stage's cleanup runs and its previous outputs stay as they were."""

    def __init__(self, reason: str = "stopped by SIGTERM") -> None:
        super().__init__(reason)
        self.reason = reason


class OrphanedError(RuntimeError):
    """The process that started this one was already gone when it started."""


class RunLockedError(RuntimeError):
    """Another process holds the run directory (the message names its pid)."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def kill_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent thread exits (Linux).

    Usable as `preexec_fn` of a child that is not ours (`dvc`): the request survives exec.
    """
    if sys.platform.startswith("linux"):
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def hold_parent() -> None:
    """First thing as the process starts, for a search's worker (SEARCH_PID_ENV names the
    search) or a stage run by DVC (DVC_STAGE is set): note the parent and have the kernel
    SIGTERM this process when it dies, so a parent killed while this one still imports is
    noticed too (`die_with_parent` compares with the parent noted here). A worker whose
    search is already gone exits at once."""
    global _parent_at_start
    if _parent_at_start is not None:
        return
    search = os.environ.get(SEARCH_PID_ENV, "")
    if search.isdigit():
        _parent_at_start = int(search)
    elif os.environ.get("DVC_STAGE"):
        _parent_at_start = os.getppid()
    else:
        return
    kill_with_parent()
    if search.isdigit() and os.getppid() != _parent_at_start:
        raise SystemExit("error: search: the search that started this worker has stopped")


def _stops_not_dropped(previous: Callable[[Any], object]) -> Callable[[Any], None]:
    """An unraisable-exception hook that sends a stop dropped in a finalizer again.

    A signal's exception (Ctrl-C's KeyboardInterrupt, SIGTERM's `Terminated`) that lands
    while a `__del__` runs (a ZipFile's, say, collected mid-trial) cannot leave it: Python
    prints "Exception ignored in ..." with a traceback and drops it, and the process goes on
    as if never stopped. The hook has the same signal sent again a moment later, from a
    thread: sent from the hook itself, its handler would run in the hook, and be dropped
    once more. Anything else goes to `previous`."""

    def hook(unraisable: Any) -> None:
        stop = unraisable.exc_value
        if not isinstance(stop, KeyboardInterrupt):
            previous(unraisable)
            return
        if sys.is_finalizing():  # exiting anyway; no thread can start
            return
        signum = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
        resend = threading.Timer(RESEND_S, _thread.interrupt_main, args=(signum,))
        resend.daemon = True
        resend.start()

    return hook


@contextlib.contextmanager
def stopping_on_sigterm() -> Iterator[None]:
    """While the block runs, SIGTERM raises `Terminated` in the main thread, so `finally`
    blocks run, and a stop raised inside a finalizer is not lost (`_stops_not_dropped`);
    the previous handler and hook are back afterwards (no-op outside the main thread)."""

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _stops_not_dropped(previous_hook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)


def die_with_parent(parent_pid: int | None = None) -> None:
    """End this process (SIGTERM, so cleanup runs) when the process that started it dies,
    even by SIGKILL; `parent_pid` (default: the current parent) is the one expected.

    Raises `OrphanedError` if that parent is already gone. Through a shell, the shell's own
    parent is watched too: the shell outlives a killed `dvc` and would not tell us.
    """
    if parent_pid is None:
        parent_pid = os.getppid() if _parent_at_start is None else _parent_at_start
    expected = parent_pid
    kill_with_parent()
    # Re-parented (to init, pid 1, unless init is what started it, as `dvc` in a container).
    adopted = expected == 1 and "dvc" not in (_command_line(1) or "")
    if os.getppid() != expected or adopted:
        raise OrphanedError("the process that started this one has stopped; exiting")
    watched = [expected]
    if _command_name(expected) in _SHELLS:
        grandparent = _parent_of(expected)
        if grandparent not in (None, 0, 1):
            watched.append(grandparent)
    births = {pid: _start_time(pid) for pid in watched}
    me = os.getpid()

    def watch() -> None:
        while True:
            time.sleep(POLL_S)
            gone = os.getppid() != expected or any(
                _start_time(pid) != born for pid, born in births.items()
            )
            if gone:
                os.kill(me, signal.SIGTERM)
                return

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def _proc_stat(pid: int) -> list[str] | None:
    """`/proc/PID/stat` after the command name, or None (no such process, or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def _command_line(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return None


def _command_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _parent_of(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[1]) if fields else None


def _start_time(pid: int) -> str | None:
    """When `pid` started (so a reused pid reads as a different process); None if gone."""
    fields = _proc_stat(pid)
    if fields is not None:
        return fields[19] if fields[0] != "Z" else None  # a zombie has died already
    try:  # no /proc (macOS): alive or not is all we can tell
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "alive"


@contextlib.contextmanager
def run_lock(path: Path, what: str) -> Iterator[None]:
    """Hold `path` (created if missing, never deleted) as this run's lock while the block
    runs; `RunLockedError` naming the holder's pid if another process holds it.

    An advisory `flock`: the kernel releases it when the holder dies, however it dies, so
    a killed run never leaves a stale lock.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunLockedError(
                f"{what} is already running (pid {holder}, holding {path}): wait for it to "
                "finish or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
