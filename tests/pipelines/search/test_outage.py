"""The search through an outage of its PostgreSQL server (`pipelines.search.outage`).

A real server (`postgres_server.py`) is stopped and started again on the same port while
a 3-process search runs: the search waits for it and completes its study, no trial lost or
counted twice. Past `search.db_outage_s` it stops in one line and a new search resumes.
The writes that must not run twice (a trial's creation, its state) are tried again after a
connection lost just after the server committed them.
"""

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.exceptions import StorageInternalError
from optuna.storages import RDBStorage
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search import outage
from pipelines.search.database import database_storage
from pipelines.search.outage import CREATION, OutageTolerantStorage
from pipelines.search.study import open_study
from pipelines.search.trials import retry_of

pytest.importorskip("pgserver", reason="the dev extra installs pgserver (PostgreSQL)")
pytest.importorskip("psycopg", reason="the dev extra installs psycopg")
sys.path.insert(0, str(Path(__file__).parent))
from postgres_server import Server, postgres_server

TRIAL_STEPS = 8 * 16 * 100  # about a second of a core per trial
# Trials that run while the server restarts: long enough that the first process does not
# finish the study alone while the other two still start (import torch), ~4 s of a core.
RESTART_TRIAL_STEPS = 3 * TRIAL_STEPS
optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = [
    pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used"),  # ask()
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
]


@pytest.fixture(scope="module")
def server() -> Server:
    with postgres_server() as started:
        yield started


def study_params(
    url: str, name: str, n_trials: int, outage_s: float, steps: int = TRIAL_STEPS
) -> dict:
    return {
        "name": "pg-outage",
        "preset": "none",
        "env": {"name": "cartpole", "num_envs": 8},
        "policy": {"hidden_sizes": [8], "activation": "relu"},
        "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 1}},
        "trainer": {"total_env_steps": steps, "num_steps": 16, "eval_episodes": 1},
        "runtime": {"threads": 1},
        "search": {
            "study_name": name,
            "space": {
                "algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            },
            "overrides": {"trainer.eval_every_iters": 10},
            "pruner": "none",
            "sampler": "random",
            "n_trials": n_trials,
            "storage": url,
            "heartbeat_s": 1,
            "grace_s": 3,  # shorter than the outage: live trials must not be failed after it
            "db_outage_s": outage_s,
        },
    }


def start_search(directory: Path, data: dict, workers: int) -> subprocess.Popen:
    directory.mkdir(exist_ok=True)
    (directory / "params.yaml").write_text(yaml.safe_dump(data))
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines", "search", "--workers", str(workers)],
        cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def trials_of(data: dict, directory: Path) -> list[optuna.trial.FrozenTrial]:
    return open_study(parse_params(data), Layout(directory)).get_trials()


def wait_for(condition, what: str, timeout: float = 120.0) -> None:
    """Poll `condition`; the deadline is generous: a worker starting beside `make test`'s
    other process on 2 cores once took over 60 s to finish its first trial."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} never happened")


def outage_during_trials(
    search: subprocess.Popen, data: dict, directory: Path, server: Server, outage_s: float
) -> None:
    """Once a trial has completed and others run, stop the server for `outage_s`."""

    def trials_running() -> bool:
        assert search.poll() is None, "the search ended before the outage"
        states = [t.state for t in trials_of(data, directory)]
        return TrialState.COMPLETE in states and states.count(TrialState.RUNNING) >= 2

    wait_for(trials_running, "a completed trial and two running ones", timeout=120)
    server.stop()
    time.sleep(outage_s)
    server.start()


def said_on_stderr(err: str) -> list[str]:
    """stderr's lines but Optuna's notes that a worker loads the study (`[I ...]`)."""
    return [line for line in err.splitlines() if not line.startswith("[I ")]


def assert_each_trial_once(trials: list[optuna.trial.FrozenTrial]) -> None:
    assert [t.number for t in trials] == list(range(len(trials)))
    tokens = [t.system_attrs[CREATION] for t in trials]
    assert len(set(tokens)) == len(tokens)  # no creation committed twice


def test_a_three_process_search_rides_out_a_server_restart(server, tmp_path):
    """The server is down for 8 s (longer than grace_s 3) while 3 processes train: each
    says the outage once, their trials go on, none is failed for its missed heartbeats.
    12 trials: with 6, a loaded machine once let the first worker finish the study before
    the others had started (`make test` beside two benchmarks on 2 cores)."""
    n_trials = 12
    name = f"restart-{tmp_path.name}"
    data = study_params(server.url, name, n_trials, outage_s=120, steps=RESTART_TRIAL_STEPS)
    search = start_search(tmp_path, data, workers=3)
    try:
        outage_during_trials(search, data, tmp_path, server, outage_s=8.0)
        out, err = search.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            search.kill()
    assert search.returncode == 0 and "Traceback" not in out + err, (out[-3000:], err[-3000:])
    assert not said_on_stderr(err), err
    assert 1 <= out.count("[search] lost the database at postgresql+psycopg://rl:***@") <= 3
    assert out.count("[search] the database is back after") == out.count("lost the database")

    trials = trials_of(data, tmp_path)
    assert_each_trial_once(trials)
    states = [t.state for t in trials]
    assert set(states) == {TrialState.COMPLETE}, [(t.number, t.state) for t in trials]
    assert n_trials <= len(trials) <= n_trials + 2  # +1 per worker that started one at the end


def test_an_outage_longer_than_db_outage_s_is_one_line_and_the_study_resumes(server, tmp_path):
    data = study_params(server.url, f"gone-{tmp_path.name}", n_trials=6, outage_s=3)
    search = start_search(tmp_path, data, workers=2)
    try:

        def trials_running() -> bool:
            states = [t.state for t in trials_of(data, tmp_path)]
            return TrialState.COMPLETE in states and TrialState.RUNNING in states

        # The worker process may still be starting: it waits for the server too.
        wait_for(trials_running, "a completed trial and a running one")
        server.stop()
        try:
            out, err = search.communicate(timeout=60)
        finally:
            server.start()
    finally:
        with contextlib.suppress(ProcessLookupError):
            search.kill()
    assert search.returncode == 1, (out[-3000:], err[-3000:])
    shown = server.url.replace(":s3cret-pw@", ":***@")
    assert said_on_stderr(err) == [
        f"error: search: the database at {shown} has been unreachable for 3 s; the study "
        "is intact: run the search again to resume"
    ], err
    before = trials_of(data, tmp_path)
    # Left RUNNING (usually one: the server stopped during it), for the next search, which
    # fails them by their stopped heartbeat and runs them again.
    cut_short = [t.number for t in before if t.state == TrialState.RUNNING]

    again = start_search(tmp_path, data, workers=2)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and not said_on_stderr(err), (out[-3000:], err[-3000:])
    trials = trials_of(data, tmp_path)
    assert_each_trial_once(trials)
    failed = [t.number for t in trials if t.state == TrialState.FAIL]
    assert failed == cut_short
    retried = sorted(original for t in trials if (original := retry_of(t)) is not None)
    assert retried == cut_short  # each run again once, in place of the one cut short
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert 6 <= len(complete) <= 6 + 1
    assert len(complete) + len(failed) == len(trials)


def lost_connection() -> StorageInternalError:
    """What Optuna raises for a connection lost in its session (e.g. during the commit)."""
    error = StorageInternalError("An exception is raised during the commit.")
    error.__cause__ = OperationalError(
        "COMMIT", {}, Exception("server closed the connection unexpectedly"), True
    )
    return error


@pytest.fixture
def storage(server):
    """A database storage whose outage lines are kept in `.said`."""
    said: list[str] = []
    opened = database_storage(server.url, 1, 2, 2, 10, say=said.append)
    opened.said = said
    return opened


def test_a_creation_committed_before_its_connection_was_lost_is_not_repeated(
    storage, monkeypatch, request
):
    study = optuna.create_study(storage=storage, study_name=request.node.name)
    real = outage._create_scoped_session

    @contextlib.contextmanager
    def commit_then_lose(scoped_session, *args):
        with real(scoped_session, *args) as session:
            yield session
        monkeypatch.setattr(outage, "_create_scoped_session", real)
        raise lost_connection()

    monkeypatch.setattr(outage, "_create_scoped_session", commit_then_lose)
    trial = study.ask()
    assert [t.number for t in study.get_trials()] == [trial.number] == [0]
    assert storage.said[0].startswith("[search] lost the database at postgresql+psycopg://rl:***@")
    assert storage.said[0].endswith(
        "(server closed the connection unexpectedly): retrying for up to 10 s (search.db_outage_s)"
    )
    assert storage.said[1].startswith("[search] the database is back after")


def fail_once_after_commit(monkeypatch, cls: type, name: str) -> None:
    """Make `cls.name` commit its write once, then lose its connection."""
    real = getattr(cls, name)

    def commit_then_lose(self, *args, **kwargs):
        real(self, *args, **kwargs)
        monkeypatch.setattr(cls, name, real)
        raise lost_connection()

    monkeypatch.setattr(cls, name, commit_then_lose)


def test_a_finished_state_committed_before_its_connection_was_lost_is_kept(
    storage, monkeypatch, request
):
    study = optuna.create_study(storage=storage, study_name=request.node.name)
    trial = study.ask()
    fail_once_after_commit(monkeypatch, RDBStorage, "set_trial_state_values")
    study.tell(trial, 0.5)  # the retry finds it complete: no UpdateFinishedTrialError
    (done,) = study.get_trials()
    assert done.state == TrialState.COMPLETE and done.value == 0.5


def test_a_claim_lost_with_its_connection_and_a_trial_never_beaten_are_run_again(
    server, storage, monkeypatch, request
):
    """A claim of a queued trial committed, but its answer was lost: this worker cannot tell
    its claim from another worker's, so it leaves the trial, and asks for a new one, which
    it never runs (as a process that stops before its heartbeat thread starts). Both were
    given a heartbeat as they became RUNNING: both go stale, and are failed and queued
    again with their values, like a dead worker's."""
    study = optuna.create_study(storage=storage, study_name=request.node.name)
    study.enqueue_trial({"x": 0.25})
    fail_once_after_commit(monkeypatch, OutageTolerantStorage, "_claim")
    assert study.ask().number == 1  # not the claimed trial: a new one
    time.sleep(2.5)  # grace_s 2
    # Another process, which saw no outage, fails the stale trials and queues them again.
    other = optuna.load_study(
        storage=database_storage(server.url, 1, 2, 2, 10), study_name=request.node.name
    )
    optuna.storages.fail_stale_trials(other)
    claimed, created, *retries = other.get_trials()
    assert claimed.state == created.state == TrialState.FAIL
    assert [(t.state, retry_of(t)) for t in retries] == [
        (TrialState.WAITING, 0),
        (TrialState.WAITING, 1),
    ]
    assert retries[0].system_attrs["fixed_params"] == {"x": 0.25}


def test_a_stale_query_that_rode_out_an_outage_fails_no_trial(storage, monkeypatch, request):
    """This process's first call in an outage is the stale-trial query itself: when it gets
    through, every live worker's last beat is old too (they could not beat either), so it
    fails none, as any call in the quiet time after an outage would."""
    study = optuna.create_study(storage=storage, study_name=request.node.name)
    study.ask()  # RUNNING, with its first heartbeat
    time.sleep(2.5)  # past grace_s 2: stale by its beat, as a live worker's is after an outage
    real = RDBStorage._get_stale_trial_ids

    def lose_once(self, study_id):
        monkeypatch.setattr(RDBStorage, "_get_stale_trial_ids", real)
        raise lost_connection()

    monkeypatch.setattr(RDBStorage, "_get_stale_trial_ids", lose_once)
    optuna.storages.fail_stale_trials(study)
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING]
    assert storage.said[0].startswith("[search] lost the database")


def test_an_outage_pauses_calls_and_wakes_them_when_the_server_is_back(server, storage, request):
    study = optuna.create_study(storage=storage, study_name=request.node.name)
    server.stop()
    restart = threading.Timer(2.0, server.start)
    restart.start()
    try:
        started = time.monotonic()
        trial = study.ask()  # waits for the server
        waited = time.monotonic() - started
    finally:
        restart.join()
    assert trial.number == 0 and waited >= 2.0
    assert storage.said[-1].startswith("[search] the database is back after")


def test_a_trial_whose_result_cannot_be_told_stays_running_for_its_retry(server, request, capfd):
    """The server goes away as the objective returns and stays away past db_outage_s:
    Optuna's tell gives up (its cleanup then fails with an UnboundLocalError), the
    heartbeat thread ends quietly, and the trial stays RUNNING: the next search fails it
    by its stopped heartbeat and runs it again."""
    storage = database_storage(server.url, 1, 2, 2, 1, say=lambda line: None)
    study = optuna.create_study(storage=storage, study_name=request.node.name)

    def objective(trial: optuna.Trial) -> float:
        server.stop()
        return 1.0

    try:
        with pytest.raises(Exception) as raised:
            study.optimize(objective, n_trials=1)
    finally:
        server.start()
    gone = outage.database_gone(raised.value)
    assert gone is not None and "has been unreachable for 1 s" in str(gone)
    (left,) = study.get_trials()
    assert left.state == TrialState.RUNNING and left.value is None
    assert "Traceback" not in capfd.readouterr().err  # nor from the heartbeat thread
