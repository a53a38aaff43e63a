"""A stage never outlives what started it, and one trainer holds a seed: real processes,
real signals (Linux: the kernel's parent-death signal and /proc)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from pipelines.stages.lifeline import (
    RunLockedError,
    Terminated,
    _start_time,
    run_lock,
    stopping_on_sigterm,
)

REPO = Path(__file__).resolve().parents[3]
# Long enough never to finish while a test watches it.
LONG = {
    "name": "long",
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 4},
    "policy": {"hidden_sizes": [8]},
    "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 1}},
    "trainer": {"total_env_steps": 10_000_000, "num_steps": 8, "eval_every_iters": 10_000,
                "checkpoint_every_iters": 50},
    "runtime": {"tensorboard": False},
}  # fmt: skip

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal and /proc are Linux's"
)


def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(LONG))
    env = {**os.environ, "PYTHONPATH": str(REPO), "DVC_STAGE": "train@0"}
    return tmp_path, env


def alive(pid: int) -> bool:
    return _start_time(pid) is not None  # a zombie counts as dead


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def trainer_pid(root: Path) -> int:
    """The running trainer's pid, from the lock it holds once it has started."""
    lock = root / "outputs" / "seeds" / "0" / "train.lock"
    wait_for(lambda: lock.is_file() and lock.read_text().strip().isdigit())
    return int(lock.read_text())


def test_the_run_lock_names_its_holder_and_dies_with_it(tmp_path):
    path = tmp_path / "run" / "train.lock"
    with (
        run_lock(path, "train of seed 0"),
        pytest.raises(
            RunLockedError, match=rf"train of seed 0 is already running \(pid {os.getpid()}"
        ),
        run_lock(path, "train of seed 0"),
    ):
        pass
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from pipelines.stages.lifeline import run_lock\n"
         f"with run_lock(Path({str(path)!r}), 'x'):\n print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunLockedError, match=f"pid {holder.pid}"), run_lock(path, "x"):
        pass
    holder.kill()  # however it dies, the kernel releases the lock
    holder.wait()
    with run_lock(path, "x"):
        assert path.read_text().strip() == str(os.getpid())


def test_a_second_trainer_on_the_same_seed_exits_with_one_line(tmp_path):
    root, env = project(tmp_path)
    first = subprocess.Popen(
        [sys.executable, "-m", "pipelines", "train"], cwd=root, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        pid = trainer_pid(root)
        second = subprocess.run(
            [sys.executable, "-m", "pipelines", "train"], cwd=root, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"error: train: train of seed 0 is already running (pid {pid}, holding "
            f"outputs/seeds/0/train.lock): wait for it to finish or stop it"
        ]
        # SIGTERM stops a stage like Ctrl-C: its own line, exit 143, nothing half-written.
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 143
        assert err.strip().splitlines()[-1] == (
            "error: train: stopped by SIGTERM; earlier outputs were left intact"
        )
        assert not list((root / "outputs" / "seeds" / "0").rglob(".*.tmp*"))
    finally:
        first.kill()
        first.wait()


# A stand-in for `dvc repro`: starts the stage as DVC does (directly, or through a shell that
# stays in between), then waits; the test kills it with SIGKILL, as a user's `kill -9` would.
PARENT = """
import subprocess, sys, time
command = [sys.executable, "-m", "pipelines", "train"]
if sys.argv[1] == "shell":  # `; true`: the shell cannot exec the stage, it stays its parent
    command = ["/bin/sh", "-c", " ".join(command) + "; true"]
child = subprocess.Popen(command)
if sys.argv[2:] == ["quit"]:  # gone before the stage has even finished importing
    print(child.pid, flush=True)
    raise SystemExit(0)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["direct", "shell"])
def test_a_stage_run_by_dvc_stops_when_dvc_is_killed(tmp_path, how):
    root, env = project(tmp_path)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, how], cwd=root, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        pid = trainer_pid(root)
        parent.kill()
        parent.wait()
        wait_for(lambda: not alive(pid), timeout_s=10)
    finally:
        parent.kill()
        parent.wait()


def test_a_stage_whose_dvc_died_while_it_started_never_trains(tmp_path):
    root, env = project(tmp_path)
    parent = subprocess.run(
        [sys.executable, "-c", PARENT, "direct", "quit"], cwd=root, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    pid = int(parent.stdout)
    wait_for(lambda: not alive(pid), timeout_s=30)
    assert not (root / "outputs").exists()  # it stopped before taking its seed's lock


class RaisesWhenCollected:
    """Raises `error` from its finalizer, as a stop that lands inside a `__del__` does."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __del__(self) -> None:
        raise self.error


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main thread"
)
@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Terminated()], ids=["ctrl-c", "sigterm"])
def test_a_stop_raised_inside_a_finalizer_is_raised_again_in_the_code_it_interrupted(stop):
    """Python drops an exception a `__del__` raises (it prints "Exception ignored in"): a
    Ctrl-C that landed there would be lost and the stage or worker would run on."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    hook = sys.unraisablehook
    reached = []
    try:
        with pytest.raises(type(stop)), stopping_on_sigterm():
            RaisesWhenCollected(stop)  # collected at once, its finalizer raising
            for step in range(1000):  # the stop is raised again here, a moment later
                reached.append(step)
                time.sleep(0.005)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert 0 < len(reached) < 1000
    assert sys.unraisablehook is hook  # put back as it was


def test_other_errors_in_finalizers_still_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable))
    if threading.current_thread() is threading.main_thread():
        with stopping_on_sigterm():
            RaisesWhenCollected(ValueError("a finalizer's own error"))
        assert [str(u.exc_value) for u in seen] == ["a finalizer's own error"]
