"""Running the suite's pending jobs. Processes (one per core, or one per host) may share a
results folder: each job is claimed before it starts, so no two of them run it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.common import BENCHMARK_PACKAGES
from benchmarks.env_defaults import EVAL_EPISODES
from benchmarks.suite.jobs import Job, Runner, load_result, read_json, settings_hash, train
from pipelines.files import write_json
from pipelines.stages.lifeline import stopping_on_sigterm
from rlcore.runtime import provenance


def _alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def claim_path(results: Path, job: Job) -> Path:
    """Where a process marks `job` as running (`claim`)."""
    return results / f"{job.filename}.running"


def claim(results: Path, job: Job) -> str | None:
    """Mark `job` as running here by creating `<its result file>.running` exclusively (host,
    pid, start); None on success, else who holds it. A claim left on this host by a process
    that is gone (killed before it could remove its claim) is taken over; another host's is
    respected (delete the file to run the job here)."""
    path = claim_path(results, job)
    mine = {"host": socket.gethostname(), "pid": os.getpid(),
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            held = read_json(path)
            held = held if isinstance(held, dict) else {}
            pid = held.get("pid")  # none yet: its owner is writing it
            stale = held.get("host") == mine["host"] and isinstance(pid, int) and pid > 0
            stale = stale and not _alive(pid)
            if not stale:
                return f"{held.get('host', '?')} pid {held.get('pid', '?')} ({path.name})"
            path.unlink(missing_ok=True)
            continue
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(mine, out)
        except BaseException:  # stopped while writing it: no claim is left behind
            path.unlink(missing_ok=True)
            raise
        return None
    return f"another process ({path.name})"


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Let `kill` (SIGTERM), `kill -INT` and Ctrl-C stop the runs inside through Python, so
    that `run_pending` removes its claim before the process goes (a claim left by a killed
    process is taken over only on its own host; it would hold the job on every other host
    sharing the results), and end with one line, not a traceback. A job started with `&`
    from a script inherits SIGINT ignored: the handler is installed again."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stopping_on_sigterm():
            yield
    except KeyboardInterrupt as stop:  # Terminated (SIGTERM) is one
        why = getattr(stop, "reason", "interrupted")
        raise SystemExit(f"suite: {why}; finished runs are kept: run it again to go on") from None


@contextlib.contextmanager
def _stops_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while inside, then hand each that came to the handler that
    was in place, so that a stop cannot fall between a claim's creation and the code that
    removes it. (A signal mask would not do: it is per thread, and torch's threads would take
    the signal.) Python runs signal handlers in the main thread only: elsewhere, no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    before = {
        signum: signal.signal(signum, lambda signum, _: came.append(signum)) for signum in held
    }
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        for signum in came:
            signal.raise_signal(signum)  # its own handler runs now (or ignores it, as before)


def run_pending(
    jobs: Sequence[Job], results: Path, runner: Runner = train, eval_episodes: int = EVAL_EPISODES
) -> None:
    """Run each job that has no finished result in `results`, writing its result file when it
    ends (atomically: an interrupted run leaves none, and is redone by the next call).

    Each job is looked up again just before it would start, so several processes can share
    one `results` directory (one per core, each given the envs in its own order): a job that
    another process finished in the meantime is skipped, and so is one that another live
    process is running (`claim`).
    """
    results.mkdir(parents=True, exist_ok=True)
    pending = [job for job in jobs if load_result(results / job.filename, job) is None]
    print(f"{len(jobs) - len(pending)} of {len(jobs)} runs done earlier; {len(pending)} to run")
    for i, job in enumerate(pending, 1):
        claimed = False
        try:  # the claim goes once the result is written (or the run failed or was stopped)
            with _stops_deferred():  # a stop lands after `claimed` says whose claim it is
                holder = claim(results, job)
                claimed = holder is None
            if not claimed:
                print(f"[{i}/{len(pending)}] {job}: running in {holder}, skipped", flush=True)
                continue
            if load_result(results / job.filename, job) is not None:  # looked up while claimed
                print(f"[{i}/{len(pending)}] {job}: finished by another process, skipped",
                      flush=True)  # fmt: skip
                continue
            print(f"[{i}/{len(pending)}] {job}", flush=True)
            row = runner(job, eval_episodes)
            result = {
                "job": dataclasses.asdict(job),
                **{key: row[key] for key in ("return", "cpu_s", "wall_s", "env_steps")},
                **({"compiled": row["compiled"]} if "compiled" in row else {}),
                "eval_episodes": eval_episodes,
                "settings": settings_hash(job),
                "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
                "versions": provenance(packages=BENCHMARK_PACKAGES),
            }
            write_json(results / job.filename, result)
        finally:
            if claimed:
                claim_path(results, job).unlink(missing_ok=True)
        print(f"  return {row['return']:.1f}, train CPU {row['cpu_s']:.1f} s", flush=True)
