"""The search on a real PostgreSQL server shared by workers in two project directories.

The server is PostgreSQL itself (the `pgserver` wheel's binaries, `postgres_server.py`),
over TCP with a password. "Other machines" are separate processes in separate directories,
each with its own params.yaml, as two clones on two machines would be.

`KILL_TEST_RUNS=20 python -m pytest tests/pipelines/search/test_database.py -k killed`
repeats the kill-a-worker test (the suite runs it once).
"""

import contextlib
import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.study import open_study
from pipelines.search.trials import WORKER

pytest.importorskip("pgserver", reason="the dev extra installs pgserver (PostgreSQL)")
pytest.importorskip("psycopg", reason="the dev extra installs psycopg")
sys.path.insert(0, str(Path(__file__).parent))
from postgres_server import PASSWORD, free_port, postgres

KILL_TEST_RUNS = int(os.environ.get("KILL_TEST_RUNS", "1"))
TRIAL_STEPS = 8 * 16 * 800  # ~5 s of a core per trial: long enough to be killed in
optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def database() -> str:
    with postgres() as url:
        yield url


def study_params(url: str, name: str, n_trials: int = 6) -> dict:
    return {
        "name": "pg-search",
        "preset": "none",
        "env": {"name": "cartpole", "num_envs": 8},
        "policy": {"hidden_sizes": [16], "activation": "relu"},
        "algorithm": {"ppo": {"num_epochs": 2, "num_minibatches": 2}},
        "trainer": {"total_env_steps": TRIAL_STEPS, "num_steps": 16, "eval_episodes": 2},
        "runtime": {"threads": 1},
        "search": {
            "study_name": name,
            "space": {
                "algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
                "policy.hidden_sizes": {"type": "categorical", "choices": [[8], [16, 16]]},
            },
            "overrides": {"trainer.eval_every_iters": 20},
            "pruner": "none",
            "n_trials": n_trials,
            "storage": url,
            "heartbeat_s": 1,
            "grace_s": 3,
        },
    }


def project(path: Path, data: dict) -> Path:
    path.mkdir()
    (path / "params.yaml").write_text(yaml.safe_dump(data))
    return path


def start(directory: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines", "search", *args],
        cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def trials(data: dict, tmp_path: Path):
    return open_study(parse_params(data), Layout(tmp_path)).get_trials()


def wait_for(condition, what: str, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"{what} never happened")


def running_trial_of(data: dict, tmp_path: Path, pid: int):
    owner = f"{socket.gethostname()}:{pid}"
    for trial in trials(data, tmp_path):
        if trial.state == TrialState.RUNNING and trial.user_attrs.get(WORKER) == owner:
            return trial
    return None


@pytest.mark.parametrize("run", range(KILL_TEST_RUNS))
def test_a_killed_workers_trial_is_retried_and_the_study_completes(database, tmp_path, run):
    """3 workers from 2 directories, started in any order and any mode (the third is a
    plain `search`, not `--join`, started while the others' trials run: it must fail none
    of them); one is killed mid-trial; the others fail its trial by its stopped heartbeat,
    run it again, and complete the study."""
    data = study_params(database, f"kill-{run}-{tmp_path.name}")
    a, b = project(tmp_path / "a", data), project(tmp_path / "b", data)
    first = start(a)
    procs = [first]
    try:
        wait_for(lambda: running_trial_of(data, tmp_path, first.pid), "a first trial")
        procs += [start(a, "--join"), start(b)]
        victim = procs[2]
        # Killed once it has sampled the whole space, so the retry must repeat every value
        # (a worker killed mid-sampling leaves a partial trial whose retry samples the rest).
        space = set(data["search"]["space"])
        killed = wait_for(
            lambda: (
                (t := running_trial_of(data, tmp_path, victim.pid)) and set(t.params) == space and t
            ),
            "B's trial with all its parameters sampled",
        )
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        outs = [p.communicate(timeout=300)[0] for p in procs[:2]]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for p, out in zip(procs[:2], outs, strict=True):
        assert p.returncode == 0 and "Traceback" not in out, out[-3000:]

    done = trials(data, tmp_path)
    numbers = [t.number for t in done]
    assert numbers == list(range(len(done)))  # unique, none missing
    states = [t.state for t in done]
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states
    failed = [t for t in done if t.state == TrialState.FAIL]
    assert [t.number for t in failed] == [killed.number], [(t.number, t.state) for t in done]
    retries = [t for t in done if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == killed.params
    complete = [t for t in done if t.state == TrialState.COMPLETE]
    assert 6 <= len(complete) <= 6 + 2  # n_trials; +1 per worker that started one at the end
    # Every worker that lived ran trials; the retry ran in one of them.
    owners = {t.user_attrs[WORKER] for t in complete}
    assert owners <= {f"{socket.gethostname()}:{p.pid}" for p in procs[:2]}
    said = f"trial {retries[0].number} (a retry of trial {killed.number}, whose worker died)"
    assert said in outs[0] + outs[1]
    with (a / "reports" / "search" / "trials.csv").open() as f:
        rows = {int(row["number"]): row for row in csv.DictReader(f)}
    assert rows[retries[0].number]["retry_of"] == str(killed.number)
    assert rows[killed.number]["worker"] == f"{socket.gethostname()}:{victim.pid}"


def run_cli(directory: Path, data: dict) -> subprocess.CompletedProcess:
    (directory / "params.yaml").write_text(yaml.safe_dump(data))
    return subprocess.run(
        [sys.executable, "-m", "pipelines", "search"],
        cwd=directory, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (lambda url: url.replace(PASSWORD, "wrong-pw"),
         "refused user 'rl' (password authentication failed): fix the user or password"),
        (lambda url: url.rsplit(":", 1)[0].rsplit(":", 1)[0] + f":x@127.0.0.1:{free_port()}/db",
         "cannot reach the database server at 127.0.0.1:"),
        (lambda url: url.replace("+psycopg", "+pg8000"),
         "its driver 'pg8000' is not installed: pip install pg8000, or write postgresql+psycopg"),
        (lambda url: url.replace("/postgres", "/optuna"),
         "database 'optuna' does not exist on 127.0.0.1:"),
    ],
    ids=["wrong-password", "unreachable", "missing-driver", "missing-database"],
)  # fmt: skip
def test_a_storage_that_cannot_be_used_is_one_line_and_writes_nothing(
    database, tmp_path, wrong, expected
):
    url = wrong(database)
    done = run_cli(tmp_path, study_params(url, "bad"))
    out = done.stdout + done.stderr
    lines = out.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, out
    assert lines[0].startswith("error: search: search.storage postgresql+"), lines[0]
    assert expected in lines[0] and "wrong-pw" not in lines[0] and PASSWORD not in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written
