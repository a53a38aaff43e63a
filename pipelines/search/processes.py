"""The worker processes of a search with `--workers N`: N - 1 processes of `python -m
pipelines search --worker k` beside the search's own, each in its own session and dying
with the search (`pipelines.stages.lifeline.die_with_parent`, through `--parent-pid`).

A terminal's Ctrl-C reaches the search alone, which interrupts each worker once: their
running trials are failed, their finished ones kept. A worker that dies leaves its trial
to a retry; the search says whether the study completed anyway.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.search.errors import SearchError
from pipelines.stages.lifeline import SEARCH_PID_ENV


def start_workers(params_path: Path, layout: Layout, workers: int) -> list[subprocess.Popen]:
    """Start the search's worker processes 1 .. `workers` - 1 (`python -m pipelines search
    --worker k`): each dies with this process (`--parent-pid`) and runs in its own session,
    so that a terminal's Ctrl-C reaches this process alone, which stops them."""
    command = [sys.executable, "-m", "pipelines", "search", "--params", str(params_path)]
    return [
        subprocess.Popen(
            [*command, "--worker", str(index), "--parent-pid", str(os.getpid())],
            cwd=layout.root,
            env={**os.environ, SEARCH_PID_ENV: str(os.getpid())},
            start_new_session=True,
        )
        for index in range(1, workers)
    ]


def wait_for_workers(
    workers: list[subprocess.Popen], stop: KeyboardInterrupt | None
) -> tuple[list[int], KeyboardInterrupt | None]:
    """Wait for the worker processes; `stop` (what stopped this process: a Ctrl-C, or
    SIGTERM's `Terminated`), or one arriving meanwhile: interrupt each once (its running
    trial is failed, its finished ones kept). Returns their exit codes and what stopped
    the search (None when nothing did)."""

    def interrupt() -> None:
        for process in workers:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)

    if stop is not None:
        interrupt()
    while True:
        try:
            return [process.wait() for process in workers], stop
        except KeyboardInterrupt as exc:
            if stop is None:
                stop = exc
                interrupt()


def check_nothing_lost(study: optuna.Study, n_trials: int, codes: list[int]) -> None:
    """A worker died: fine if the study still has `n_trials` complete or pruned trials,
    an error naming the lost trials otherwise (the reports above show the rest)."""
    trials = study.get_trials(deepcopy=False)
    done = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    if done >= n_trials:
        print(f"[search] a worker exited with {codes}; the study completed anyway", flush=True)
        return
    lost = [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.FAIL)]
    raise SearchError(
        f"worker exit codes {codes}: the study has {done} of {n_trials} complete or pruned "
        f"trials; failed or unfinished: {lost}; run the search again to complete it"
    )
