"""Kill `dvc repro`, a flow and a search at random points; count what they leave running.

Run from the repository root (Linux: reads /proc):

    .venv/bin/python -m benchmarks.kill_runs                  # 20 runs per target and signal
    .venv/bin/python -m benchmarks.kill_runs --runs 5 --targets repro

A throwaway git + DVC project (this working tree's `pipelines`, `rlcore` and DVC files, a
small CartPole experiment of 2 seeds with a resume checkpoint every 4 iterations) is started
`--runs` times per target and signal, and each time the one process a user would kill
(`dvc repro`, `python -m pipelines flow` on a throwaway Prefect server, or `python -m
pipelines search --workers 2`) gets SIGTERM or SIGKILL after a random delay. After each
kill it counts:

- orphans: processes of the project's stages (`python -m pipelines ...` running in it, and
  for a flow the `dvc` it started)
  still alive 3 s after the target exited (then killed, so the next run starts clean): a
  stage that outlives its parent stops within a second; an orphan trains on (the runs here
  are short, so a longer wait would let an orphan finish and go uncounted);
- second trainers: a trainer that found its seed's lock held (`is already running`);
- resumed: runs that continued an interrupted trainer from its checkpoint.

Then it runs the target to the end once more: `dvc repro` and the flow must exit 0 and
leave `dvc status` clean; the search must complete its `n_trials` with none run twice.
Targets (issue 43): no orphan and no second trainer, ever; the final run clean.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import merged, scratch_env, scratch_project

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = {
    "name": "kill",
    "seeds": [0, 1],
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [32]},
    "algorithm": {"ppo": {"lr": 1e-3, "num_epochs": 2, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 16 * 8 * 100, "num_steps": 16, "eval_every_iters": 10,
                "eval_episodes": 2, "checkpoint_every_iters": 4, "stop_at_eval_success": None},
    "runtime": {"tensorboard": False},
    "evaluation": {"episodes": 4},
    "video": {"episodes": 2, "frame_size": 32, "max_steps": 20},
    "search": {
        "study_name": "kill",
        "space": {"algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "overrides": {"trainer.total_env_steps": 16 * 8 * 20},
        "n_trials": 6,
    },
}  # fmt: skip
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
COMMANDS = {
    "repro": [sys.executable, "-m", "dvc", "repro"],
    "search": [sys.executable, "-m", "pipelines", "search", "--workers", "2"],
    "flow": [sys.executable, "-m", "pipelines", "flow"],  # its `dvc repro <stage>` tasks
}
# Processes counted as left running: the stages, and for a flow the `dvc` it started.
LEFT_BEHIND = {"repro": ("pipelines",), "search": ("pipelines",), "flow": ("pipelines", "dvc")}
STATUS = [sys.executable, "-m", "dvc", "status", "--json", "dvc.yaml"]  # not the search
ORPHAN_GRACE_S = 3.0


def stale_stages(root: Path, env: dict[str, str]) -> dict[str, Any]:
    """What `dvc status` finds to do in the experiment, but the `plugins` stage, which is
    always changed (it re-reads a plugin's source on every repro)."""
    done = subprocess.run(STATUS, cwd=root, env=env, capture_output=True, text=True, check=True)
    status = json.loads(done.stdout)
    return {stage: why for stage, why in status.items() if why != ["always changed"]}


def make_project(
    root: Path, env: dict[str, str], changes: dict | None = None, source: Path = REPO
) -> None:
    """The code and pipeline of `source` (this working tree) with `EXPERIMENT` (and
    `changes` to it), committed in a new repo."""
    defaults = yaml.safe_load((source / "params.yaml").read_text())
    whole = ("space", "overrides")  # the experiment's search space, not the default's too
    experiment = merged(defaults, merged(EXPERIMENT, changes or {}, whole), whole)
    scratch_project(root, env, experiment, source)


def stage_processes(root: Path, module: str = "pipelines") -> dict[int, str]:
    """Live `python -m <module> ...` processes (the stages, or `dvc`) working in `root`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") != str(root):
                continue
            args = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        command = " ".join(a.decode(errors="replace") for a in args if a)
        if state != "Z" and f"-m {module}" in command:
            found[int(entry.name)] = command
    return found


@dataclass
class Tally:
    runs: int = 0
    killed: int = 0  # the signal arrived while the target was still running
    orphans: int = 0
    second_trainers: int = 0
    resumed: int = 0
    final_ok: bool = False
    final_note: str = ""
    orphan_commands: list[str] = field(default_factory=list)


def wait_for_orphans(
    root: Path, module: str = "pipelines", grace_s: float = ORPHAN_GRACE_S
) -> dict[int, str]:
    """The processes of `module` still working in `root` after `grace_s` (killed)."""
    deadline = time.monotonic() + grace_s
    while (left := stage_processes(root, module)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:  # counted; cleared so the next run starts clean
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def make_work(root: Path, target: str, env: dict[str, str], flip: list[int]) -> None:
    """Give the target something to do again once a run has finished it all."""
    if target in ("repro", "flow"):
        if stale_stages(root, env):
            return
        params = yaml.safe_load((root / "params.yaml").read_text())
        flip[0] += 1
        params["algorithm"]["ppo"]["lr"] = 1e-3 * (1 + flip[0] % 2)
        (root / "params.yaml").write_text(yaml.safe_dump(params))
    else:
        params = yaml.safe_load((root / "params.yaml").read_text())
        search = params["search"]
        if len(_complete_trials(root)) >= search["n_trials"]:
            search["n_trials"] += 2
            (root / "params.yaml").write_text(yaml.safe_dump(params))


def _complete_trials(root: Path) -> list[int]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    journal = root / "outputs" / "search" / "journal.log"
    if not journal.exists():
        return []
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    storage = JournalStorage(JournalFileBackend(str(journal)))
    study = optuna.load_study(study_name="kill", storage=storage)
    states = optuna.trial.TrialState
    return [t.number for t in study.get_trials(deepcopy=False, states=(states.COMPLETE,))]


def kill_rounds(
    root: Path, target: str, sig: signal.Signals, runs: int, rng: random.Random,
    env: dict[str, str], max_delay_s: float = 12.0,
) -> Tally:  # fmt: skip
    tally, flip = Tally(), [0]
    for _ in range(runs):
        make_work(root, target, env, flip)
        log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (read after the run, then closed)
        process = subprocess.Popen(COMMANDS[target], cwd=root, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        time.sleep(rng.uniform(0.5, max_delay_s))
        tally.runs += 1
        if process.poll() is None:
            process.send_signal(sig)
            tally.killed += 1
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        left = {pid: c for m in LEFT_BEHIND[target] for pid, c in wait_for_orphans(root, m).items()}
        tally.orphans += len(left)
        tally.orphan_commands += list(left.values())
        log.seek(0)
        output = log.read()
        log.close()
        tally.second_trainers += output.count("is already running")
        tally.resumed += output.count("[train] resuming from")
    final = subprocess.run(COMMANDS[target], cwd=root, env=env, capture_output=True, text=True)
    output = final.stdout + final.stderr
    tally.second_trainers += output.count("is already running")
    tally.resumed += output.count("[train] resuming from")
    if target in ("repro", "flow"):
        stale = stale_stages(root, env)
        tally.final_ok = final.returncode == 0 and not stale
        tally.final_note = "dvc status clean" if not stale else json.dumps(stale)[-300:]
    else:
        n_trials = yaml.safe_load((root / "params.yaml").read_text())["search"]["n_trials"]
        complete = _complete_trials(root)
        tally.final_ok = final.returncode == 0 and len(complete) == n_trials
        tally.final_note = f"{len(complete)} of {n_trials} trials complete"
    if final.returncode:
        tally.final_note += f"; exit {final.returncode}: {output.strip()[-300:]}"
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="kills per target and signal")
    parser.add_argument("--targets", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    parser.add_argument("--signals", nargs="+", choices=list(SIGNALS), default=list(SIGNALS))
    parser.add_argument("--seed", type=int, default=0, help="of the random kill delays")
    parser.add_argument(
        "--source", type=Path, default=REPO,
        help="the checkout whose code runs (e.g. a `git worktree` of an older revision)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        raise SystemExit("kill_runs reads /proc: Linux only")
    rng, env, failed = random.Random(args.seed), scratch_env(), False
    print(
        f"# kill_runs: {args.runs} runs per target and signal, delays 0.5-12 s, seed "
        f"{args.seed}, code of {args.source}"
    )
    print("| target | signal | runs | killed | orphans | second trainers | resumed | final run |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    with contextlib.ExitStack() as stack:
        if "flow" in args.targets:
            env["PREFECT_API_URL"] = stack.enter_context(prefect_server())
        for target in args.targets:
            failed |= _target_rows(target, args, rng, env)
    print("targets met" if not failed else "TARGETS MISSED")
    return 1 if failed else 0


@contextlib.contextmanager
def prefect_server() -> Iterator[str]:
    """A throwaway Prefect server (and SQLite file) for the flow runs; yields its URL."""
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield str(PREFECT_API_URL.value())


def _target_rows(
    target: str, args: argparse.Namespace, rng: random.Random, env: dict[str, str]
) -> bool:
    """Print the target's row per signal; True if a target was missed."""
    failed = False
    for name in args.signals:
        with tempfile.TemporaryDirectory(prefix="kill-runs-") as tmp:
            root = Path(tmp)
            make_project(root, env, source=args.source)
            start = time.perf_counter()
            t = kill_rounds(root, target, SIGNALS[name], args.runs, rng, env)
        ok = t.final_ok and not t.orphans and not t.second_trainers
        failed |= not ok
        print(f"| {target} | {name} | {t.runs} | {t.killed} | {t.orphans} | "
              f"{t.second_trainers} | {t.resumed} | {t.final_note} "
              f"({time.perf_counter() - start:.0f} s) |", flush=True)  # fmt: skip
        for command in t.orphan_commands:
            print(f"  orphan: {command}")
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
