"""Trials a killed worker or a Ctrl-C interrupted are run again
(`pipelines.search.recovery`)."""

import os
import signal
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.recovery import requeue_stopped
from pipelines.search.stage import search
from pipelines.search.study import open_study
from pipelines.search.worker import run_worker
from rlcore.errors import NonFiniteError
from tests.pipelines.search.tiny_study import TINY, ctrl_c, run_cli, with_search


def test_killed_worker_leaves_a_loadable_study_that_continues(tmp_path):
    # Slow trials (1,024 steps per evaluation) so the kill lands mid-trial.
    data = with_search(n_trials=3, pruner="none", overrides={"trainer.eval_every_iters": 8})
    data["trainer"] = {**TINY["trainer"], "total_env_steps": 8 * 16 * 400}
    worker = run_cli(tmp_path, "--worker", data=data, start_new_session=True)  # worker 0
    params, layout = parse_params(data), Layout(tmp_path)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if layout.search_journal.exists():
            running = open_study(params, layout).get_trials(states=(TrialState.RUNNING,))
            if running:
                break
        time.sleep(0.1)
    else:
        pytest.fail("the worker never started a trial")
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()

    # A new search repairs what the kill left (it may have landed mid-write), fails the
    # orphan and completes the study. Nothing opens the journal before it does.
    data["trainer"]["total_env_steps"] = 8 * 16 * 4
    proc = run_cli(tmp_path, data=data)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "left running by a stopped worker: failed and queued again" in out
    trials = open_study(params, layout).get_trials()
    # The orphan's copy runs first and takes its place: n_trials 3 are still all run.
    assert [t.state for t in trials] == [TrialState.FAIL] + [TrialState.COMPLETE] * 3
    assert trials[1].system_attrs["failed_trial"] == 0


def test_a_search_repairs_a_journal_torn_by_a_killed_worker(tmp_path, capsys):
    # What a worker killed inside Optuna's append leaves: its lock and half a line.
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    study = open_study(params, layout)
    orphan = study.ask()
    orphan.report(1.0, 0)
    journal = layout.search_journal
    complete_bytes = journal.read_bytes()
    with journal.open("ab") as f:
        f.write(b'{"op_code":6,"worker_id":"0-')
    Path(f"{journal}.lock").touch()

    summary = search(params, layout)

    out = capsys.readouterr().out
    assert "removed the lock" in out and "dropped a write" in out and "(28 bytes)" in out
    assert journal.read_bytes().startswith(complete_bytes)  # nothing committed was lost
    trials = open_study(params, layout).get_trials()
    assert trials[0].state == TrialState.FAIL and trials[0].intermediate_values == {0: 1.0}
    # The orphan's copy ran too and took its place: the summary counts it, not the orphan.
    assert summary["complete"] == 2 and summary["fail"] == 0 and summary["retried"] == 1
    assert not Path(f"{journal}.lock").exists()


def test_a_trial_stopped_by_ctrl_c_runs_again_when_the_study_resumes(tmp_path, capsys):
    """Stopping a study must not cost the stopped trial's place in n_trials, nor its sample:
    the resumed search runs a copy with the same values first, then samples the rest."""
    params, layout = parse_params(with_search(n_trials=3, pruner="none")), Layout(tmp_path)

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c)
    (stopped,) = open_study(params, layout).get_trials()
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["interrupted"] is True

    summary = search(params, layout)
    out = capsys.readouterr().out
    assert "trials [0] were stopped (Ctrl-C or SIGTERM): queued again" in out
    # The copy takes the stopped trial's place in the count: 1 of 3 done, not 2.
    assert "trial 1 (a retry of trial 0, which a Ctrl-C stopped) complete" in out
    assert "(1/3 finished)" in out and "(4/3 finished)" not in out
    trials = open_study(params, layout).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL] + [TrialState.COMPLETE] * 3
    assert trials[1].params == stopped.params and trials[1].system_attrs["failed_trial"] == 0
    assert trials[1].user_attrs["interrupted"] is False  # copied, then cleared: it ran on
    assert summary["complete"] == 3 and summary["fail"] == 0
    assert summary["trials"] == 3 and summary["retried"] == 1
    summary_md = (layout.search_reports / "summary.md").read_text()
    assert "Trials: 3 complete (3 of `n_trials` 3); 1 stopped trial(s) ran again" in summary_md
    # A second resume queues nothing again: the copy already replaced the stopped trial.
    search(params, layout)
    assert "were stopped (Ctrl-C or SIGTERM)" not in capsys.readouterr().out
    assert len(open_study(params, layout).get_trials()) == 4


def test_a_retry_that_fails_on_its_own_is_not_queued_again(tmp_path):
    """The copy inherits its original's `interrupted` attribute: only a Ctrl-C of the copy
    itself may mark it so, or a copy whose loss went NaN would be run again."""
    params, layout = parse_params(with_search(n_trials=1, pruner="none")), Layout(tmp_path)

    def diverge(trainer, *args, **kwargs):
        raise NonFiniteError("the loss is nan")

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c)
    assert requeue_stopped(open_study(params, layout), retries=2) == [0]
    run_worker(params, layout, train=diverge)
    _, copy = open_study(params, layout).get_trials()
    assert copy.state == TrialState.FAIL and copy.user_attrs["interrupted"] is False
    assert requeue_stopped(open_study(params, layout), retries=2) == []


def test_a_trial_stopped_more_than_retries_times_is_not_queued_again(tmp_path):
    params = parse_params(with_search(n_trials=1, pruner="none", retries=0))
    layout = Layout(tmp_path)

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c)
    assert requeue_stopped(open_study(params, layout), retries=0) == []
    assert [t.state for t in open_study(params, layout).get_trials()] == [TrialState.FAIL]
