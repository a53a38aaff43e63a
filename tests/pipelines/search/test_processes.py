"""A search's worker processes (`pipelines.search.processes`): disjoint trials, and
what a killed search, a dead worker or a Ctrl-C leave."""

import contextlib
import os
import signal
import sys
import time

import pytest
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.study import open_study
from tests.pipelines.search.tiny_study import (
    alive,
    children,
    read_trials,
    run_cli,
    sigint_as_in_a_terminal,
    slow_trials,
    wait_for_running_trials,
    with_search,
)


def test_two_workers_complete_disjoint_trials(tmp_path):
    data = with_search(n_trials=6, pruner="none")
    proc = run_cli(tmp_path, "--workers", "2", data=data)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    study = open_study(parse_params(data), Layout(tmp_path))
    trials = study.get_trials()
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers)) and 6 <= len(trials) <= 7  # 7: a benign race
    assert all(t.state == TrialState.COMPLETE for t in trials)
    # Both processes ran trials: each line of progress names the trial it finished.
    assert out.count(" complete value ") == len(trials)


def test_parallel_workers_sample_different_trials(tmp_path):
    data = with_search(n_trials=4, pruner="none", sampler="random")
    proc = run_cli(tmp_path, "--workers", "2", data=data)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    trials = open_study(parse_params(data), Layout(tmp_path)).get_trials()
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len(params) >= 4 and len(set(params)) == len(params), params


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_search(tmp_path):
    data = slow_trials(4)
    proc = run_cli(tmp_path, "--workers", "2", data=data, start_new_session=True)
    try:
        wait_for_running_trials(data, Layout(tmp_path), 2)
        (worker,) = children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # the search alone, as `kill -9 <pid>` would
        proc.wait()
        deadline = time.monotonic() + 300
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(worker), "the worker outlived its search"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_search_whose_worker_died_fails_naming_the_lost_trial(tmp_path):
    data = slow_trials(2)
    proc = run_cli(tmp_path, "--workers", "2", data=data, start_new_session=True)
    try:
        running = wait_for_running_trials(data, Layout(tmp_path), 2)
        (worker,) = children(proc.pid)
        os.kill(worker, signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out
    last = out.strip().splitlines()[-1]
    lost = [t.number for t in running]
    assert last.startswith("error: search: worker exit codes [-9]: the study has 1 of 2"), last
    assert any(f"failed or unfinished: [{n}]" in last for n in lost), (last, lost)
    assert "Traceback" not in out
    assert (Layout(tmp_path).search_reports / "trials.csv").exists()  # reports still written


def sigint_as_in_a_background_job() -> None:
    """What a non-interactive shell's `&` gives its job: SIGINT ignored (its workers inherit
    that too)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    ("started_as", "stop", "code", "why"),
    [
        (sigint_as_in_a_terminal, signal.SIGINT, 130, "interrupted"),
        (sigint_as_in_a_background_job, signal.SIGTERM, 143, "stopped by SIGTERM"),
        (sigint_as_in_a_background_job, signal.SIGINT, 130, "interrupted"),
    ],
    ids=["ctrl-c", "sigterm-to-a-background-job", "kill-int-to-a-background-job"],
)
def test_a_stop_stops_the_workers_and_still_writes_the_reports(
    tmp_path, started_as, stop, code, why
):
    """SIGINT to the search alone (a terminal's Ctrl-C reaches only it: its workers run in
    their own session), or SIGTERM or SIGINT (`kill -INT`, which such a job inherits
    ignored) to a search started with `&` from a script: it
    interrupts each worker once, fails the running trials, writes the reports of the study
    so far and exits 130 (143) with one message."""
    data = slow_trials(4)
    proc = run_cli(
        tmp_path,
        "--workers",
        "2",
        data=data,
        start_new_session=True,
        preexec_fn=started_as,
    )
    try:
        running = wait_for_running_trials(data, Layout(tmp_path), 2)
        (worker,) = children(proc.pid)
        os.kill(proc.pid, stop)
        out, _ = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, out
    assert "Traceback" not in out and not alive(worker)
    assert out.count(f"error: search: {why}") == 1, out
    assert "[search] interrupted with 2 of 4 trials" in out, out
    trials = open_study(parse_params(data), Layout(tmp_path)).get_trials()
    assert {t.number: t.state for t in trials} == {t.number: TrialState.FAIL for t in running}
    rows = read_trials(Layout(tmp_path))
    assert sorted(r["state"] for r in rows) == ["FAIL", "FAIL"]
    summary_md = (Layout(tmp_path).search_reports / "summary.md").read_text()
    stopped = sorted(t.number for t in running)
    note = f"trials {stopped} were stopped (Ctrl-C or SIGTERM) and run again on resuming"
    assert note in summary_md
