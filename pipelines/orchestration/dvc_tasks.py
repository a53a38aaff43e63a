"""Prefect tasks that shell out to `dvc`, and when such a task is worth a retry.

The stages run under DVC (`pipelines.orchestration.flows` says why); these tasks stream a
`dvc` command's output into the run log, tell a stage's own failure (`StageError`) from a
held lock (`DvcLockError`, retried), and read what DVC declares: a stage's metrics files,
the project's default remote.
"""

from __future__ import annotations

import os

# Prefect starts its usage telemetry when it is imported, so opt out before the first import.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import logging
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any

import httpx
from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun

from pipelines.stages.lifeline import kill_with_parent

TAIL_LINES = 20
# DVC's own error lines when another DVC process holds the repo lock or a stage's rwlock.
LOCK_ERRORS = ("Unable to acquire lock", "is busy, it is being blocked by")
# OSErrors that a retry cannot fix: the path is wrong, not the disk or the network.
PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


class StageError(RuntimeError):
    """A stage failed because of its code, params or data: a retry would fail the same way."""


class DvcLockError(RuntimeError):
    """Another DVC process held a lock DVC needed: worth a retry (repro skips finished stages)."""


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` is I/O that may succeed on a second try (never a stage's own failure)."""
    if isinstance(exc, PERMANENT_OS_ERRORS):
        return False
    return isinstance(exc, DvcLockError | OSError | httpx.TransportError)


def retry_on_io(task: Task[..., Any], task_run: TaskRun, state: State) -> bool:
    """Prefect `retry_condition_fn`: retry transient I/O only.

    Prefect calls it only if it is a plain function (`inspect.isfunction`); a partial or a
    callable object silently disables the retries.
    """
    try:
        state.result()
    except Exception as exc:
        return is_transient(exc)
    return False


def _dvc_env() -> dict[str, str]:
    """The environment of DVC and the stages it runs.

    The venv's `bin` goes first so `python` in `dvc.yaml` is this interpreter even when the venv
    is not activated (a served flow); unbuffered so stage lines stream as they are printed.
    """
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "DVC_NO_ANALYTICS": "1", "PYTHONUNBUFFERED": "1"}


# DVC warnings that a nightly `dvc exp run --temp` on fresh seeds always prints and that
# need no action: the new seeds' outputs have no versions yet to check out, and DVC's own
# .gitignore files beside them stay out of the experiment commit.
EXPECTED_DVC_WARNINGS = (
    "WARNING: No file hash info found for",
    "WARNING: The following untracked files were present in the experiment directory",
)


def _level(line: str) -> int:
    """Keep DVC's own error and warning lines visible as such in the run log."""
    if line.startswith("ERROR:"):
        return logging.ERROR
    if line.startswith(EXPECTED_DVC_WARNINGS):
        return logging.INFO
    return logging.WARNING if line.startswith("WARNING:") else logging.INFO


def _failure(label: str, code: int, tail: deque[str]) -> Exception:
    """The exception for a failed DVC command; its type decides whether Prefect retries."""
    lines = "\n  ".join(tail)
    if any(line.startswith("ERROR:") and any(m in line for m in LOCK_ERRORS) for line in tail):
        return DvcLockError(f"{label}: DVC could not take its lock (exit code {code}):\n  {lines}")
    return StageError(f"{label} failed with exit code {code}; last lines:\n  {lines}")


# DVC itself waits 3 s for its lock; then a quick retry for a short `dvc` command, and two
# longer ones for a concurrent `dvc repro` to finish.
@task(
    task_run_name="{label}",
    retries=3,
    retry_delay_seconds=[2, 15, 60],
    retry_condition_fn=retry_on_io,
    cache_policy=NO_CACHE,  # DVC decides what is stale; no second cache on top
)
def run_dvc(project_dir: str, args: list[str], label: str) -> None:
    """Run `dvc ARGS` in the project, streaming its output into the run log line by line."""
    logger = get_run_logger()
    logger.info("$ dvc %s  (in %s)", " ".join(args), project_dir)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with subprocess.Popen(
        [sys.executable, "-m", "dvc", *args],
        cwd=project_dir,
        env=_dvc_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        preexec_fn=kill_with_parent,  # a killed flow leaves no `dvc repro` (nor its stages)
    ) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            if line := raw.rstrip():
                tail.append(line)
                logger.log(_level(line), "%s", line)
    if process.returncode:
        raise _failure(label, process.returncode, tail)


def stage_metrics(project_dir: str, stages: list[str], dvcfile: str = "dvc.yaml") -> list[str]:
    """The JSON metrics files `dvcfile` declares for `stages` (each seed's, for a matrix
    stage), relative to the project: what those stages of this experiment wrote. Declared
    means DVC `metrics:`, or outputs annotated `type: metrics` (per-seed numbers, which
    dvc.yaml keeps out of `dvc exp show`'s columns)."""
    from dvc.repo import Repo

    with Repo(project_dir) as repo:
        declared = repo.stage.collect(str(Path(repo.root_dir, dvcfile)))
        return sorted(
            str(Path(out.fs_path).relative_to(repo.root_dir))
            for stage in declared
            if stage.name.split("@")[0] in stages
            for out in stage.outs
            if (out.metric or out.annot.type == "metrics") and out.fs_path.endswith(".json")
        )


NO_REMOTE = (
    "--push: this project has no default DVC remote: add one with `dvc remote add -d NAME "
    "URL` (a directory for one machine, any DVC remote for many) and commit .dvc/config"
)


def default_remote(root: Path) -> str | None:
    """The project's default DVC remote (`dvc remote default`), or None if it has none."""
    done = subprocess.run(
        [sys.executable, "-m", "dvc", "remote", "default"],
        cwd=root, env=_dvc_env(), capture_output=True, text=True,
    )  # fmt: skip
    name = done.stdout.strip()
    return name if done.returncode == 0 and name else None
