"""Killing `dvc repro` or a search leaves nothing running, and the next run picks up where
it stopped: a real DVC project, real signals, each sent while a trainer is mid-run.
(`benchmarks/kill_runs.py` sends them at random points, 20 times each.)"""

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.common import scratch_env
from benchmarks.kill_runs import (
    COMMANDS,
    _complete_trials,
    make_project,
    stage_processes,
    stale_stages,
    wait_for_orphans,
)

# One seed, a third of the benchmark's run: enough to be killed mid-run and resumed.
SMALL = {"seeds": [0], "trainer": {"total_env_steps": 16 * 8 * 32}, "search": {"n_trials": 4}}
# A run of several seconds, not SMALL's half second: CI once saw a loaded machine schedule the
# test's poll late enough that the trainer finished (and removed resume.pt) before the freeze.
LONGER = {"seeds": [0], "trainer": {"total_env_steps": 16 * 8 * 320}}
# The benchmark's 3 s, for a trainer that ends in a twentieth of a second (pipelines.stages.
# prompt_exit) after its lifeline's half-second poll: CI's loaded machine once took longer.
SLOW_MACHINE_GRACE_S = 10.0
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def wait_until(condition, timeout_s=120.0, poll_s=0.1):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll_s)


@pytest.fixture
def project(tmp_path):
    env = scratch_env()
    make_project(tmp_path, env, SMALL)
    return tmp_path, env


@pytest.fixture
def long_project(tmp_path):
    env = scratch_env()
    make_project(tmp_path, env, LONGER)
    return tmp_path, env


def start(root, env, target):
    return subprocess.Popen(COMMANDS[target], cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


def test_killing_dvc_repro_mid_training_leaves_nothing_and_the_next_repro_resumes(long_project):
    """SIGKILL: `dvc` cannot pass anything on. (SIGTERM's own handling: test_lifeline.py;
    both, 20 times each at random points: benchmarks/kill_runs.py.)"""
    root, env = long_project
    dvc = start(root, env, "repro")
    resume = root / "outputs" / "seeds" / "0" / "checkpoints" / "resume.pt"
    wait_until(resume.exists, poll_s=0.01)  # a trainer is running and has saved progress
    # Frozen at once, dvc and its stages together (one signal to the session's group), so the
    # trainer is still mid-run when dvc dies however fast the machine: CI once saw it finish
    # the short run between the checkpoint and a per-process stop. It gets the parent-death
    # signal the moment it runs again.
    os.killpg(dvc.pid, signal.SIGSTOP)
    trainers = [p for p, c in stage_processes(root).items() if "pipelines train" in c]
    assert trainers
    assert resume.exists(), "the trainer finished before the freeze: nothing left to resume"
    dvc.send_signal(signal.SIGKILL)
    dvc.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):  # the group outlives dvc while a stage runs
        os.killpg(dvc.pid, signal.SIGCONT)
    # Every stage process ended with dvc, and stopped rather than trained on to the end: a
    # loaded machine gets seconds to end the trainer, fewer than an orphan needs to finish.
    assert wait_for_orphans(root, grace_s=SLOW_MACHINE_GRACE_S) == {}
    assert resume.exists() and not (resume.parent / "final.pt").exists()
    final = subprocess.run(COMMANDS["repro"], cwd=root, env=env, capture_output=True, text=True)
    assert final.returncode == 0, final.stdout + final.stderr
    assert "[train] resuming from" in final.stdout, final.stdout
    assert "already running" not in final.stdout + final.stderr
    assert stale_stages(root, env) == {}


def test_killing_a_flow_mid_training_stops_its_dvc_and_the_stage(project, prefect_api_url):
    root, env = project
    flow = subprocess.Popen(
        [sys.executable, "-m", "pipelines", "flow"], cwd=root, start_new_session=True,
        env={**env, "PREFECT_API_URL": prefect_api_url}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    resume = root / "outputs" / "seeds" / "0" / "checkpoints" / "resume.pt"
    wait_until(resume.exists, timeout_s=180)  # the flow's `dvc repro train` is training
    assert any("-m dvc" in c for c in stage_processes(root, "dvc").values())
    flow.kill()
    flow.wait(timeout=60)
    # No `dvc repro` left, hence no stage either: each notices its parent's death at its
    # lifeline's next poll, which CI's loaded machine once took over 3 s to end.
    assert wait_for_orphans(root, "dvc", grace_s=SLOW_MACHINE_GRACE_S) == {}
    assert wait_for_orphans(root, grace_s=SLOW_MACHINE_GRACE_S) == {}


def test_killing_a_search_stops_its_workers_and_the_next_search_completes(project):
    root, env = project
    search = start(root, env, "search")
    # The search (itself a worker) and its second worker are up, and a trial under way.
    wait_until(lambda: len(stage_processes(root)) >= 2)
    wait_until(lambda: (root / "outputs" / "search" / "journal.log").exists())
    search.send_signal(signal.SIGKILL)
    search.wait(timeout=60)
    assert wait_for_orphans(root, grace_s=SLOW_MACHINE_GRACE_S) == {}
    final = subprocess.run(COMMANDS["search"], cwd=root, env=env, capture_output=True, text=True)
    assert final.returncode == 0, final.stdout + final.stderr
    assert sorted(_complete_trials(root)) == sorted(set(_complete_trials(root)))
    assert len(_complete_trials(root)) == 4  # n_trials, none run twice
