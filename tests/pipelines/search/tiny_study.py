"""The tiny study the search's tests share, and helpers to run and watch a search."""

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState

from pipelines.params import parse_params
from pipelines.search.study import open_study

TINY = {
    "name": "tiny-search",
    "preset": "none",  # the library's defaults: no stop target cutting a slow trial short
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"num_epochs": 2, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 8 * 16 * 4, "num_steps": 16, "eval_episodes": 2},
    "search": {
        "study_name": "tiny",
        "space": {
            "algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "policy.hidden_sizes": {"type": "categorical", "choices": [[8], [16, 16]]},
        },
        "overrides": {"trainer.eval_every_iters": 1},
        "pruner": "median",
        "startup_trials": 2,
        "warmup_evals": 0,
        "n_trials": 5,
    },
}


def with_search(**changes):
    return {**TINY, "search": {**TINY["search"], **changes}}


def read_trials(layout):
    with (layout.search_reports / "trials.csv").open() as f:
        return list(csv.DictReader(f))


def ctrl_c(trainer, *args, **kwargs):
    """A training function whose trial a Ctrl-C stops at once."""
    raise KeyboardInterrupt


def run_cli(tmp_path, *args, **popen):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(popen.pop("data", TINY)))
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines", "search", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


REPO = Path(__file__).resolve().parents[3]


def slow_trials(n_trials):
    """Trials of ~12 s: longer than a worker process takes to start (3-6 s on a loaded
    machine), so the search's own first trial is still running when the worker's starts.
    (At ~3 s it sometimes finished first and took both trials.)"""
    data = with_search(n_trials=n_trials, pruner="none", overrides={"trainer.eval_every_iters": 8})
    data["trainer"] = {**TINY["trainer"], "total_env_steps": 8 * 16 * 1600}
    return data


def wait_for_running_trials(data, layout, count, timeout=300):
    params = parse_params(data)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if layout.search_journal.exists():
            running = open_study(params, layout).get_trials(states=(TrialState.RUNNING,))
            if len(running) >= count:
                return running
        time.sleep(0.2)
    pytest.fail(f"{count} trials never ran at once")


def children(pid):
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent has yet to reap it


def sigint_as_in_a_terminal() -> None:
    """A child of a shell's background job inherits SIGINT ignored (POSIX), and Python then
    installs no KeyboardInterrupt handler: give the search the default a terminal gives."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
