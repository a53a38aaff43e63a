"""A suite of tasks nobody tuned: only `env.name` set, against SB3's defaults, side by side.

Run from the repository root (needs the `bench` extra; `mujoco` for the MuJoCo tasks):

    .venv/bin/python -m benchmarks.suite                    # PPO: 11 MuJoCo v5 + 5 classic tasks
    .venv/bin/python -m benchmarks.suite --algorithm sac    # SAC: the continuous-action tasks
    .venv/bin/python -m benchmarks.suite --envs Hopper-v5 Pendulum-v1 --seeds 0
    .venv/bin/python -m benchmarks.suite --estimate-only    # short timings: CPU time per run
    .venv/bin/python -m benchmarks.suite --report-only      # the table of the results so far

Per task, seed and implementation, ours is what a params.yaml holding only
`env: {name: "gymnasium:<id>"}` (for SAC also `algorithm: {name: sac}`) trains (`preset:
auto`, `benchmarks.env_defaults.run_ours`); SB3 is `PPO("MlpPolicy", env)` or
`SAC("MlpPolicy", env)` with every default on one env (`run_sb3`). Each is evaluated on
deterministic episodes with seeds training never used. Budgets: PPO 300k env steps on MuJoCo,
100k on classic control; SAC 100k; `--steps` sets one for all. Runs go one after another in
this process on the CPU, with the torch threads of `--threads` (default 1), checked after each
run, taking turns per seed; CPU time is the process's for training, evaluation excluded. To
use more cores, start one process per core on the same `--results`, each with its own
`--envs` (or `--seeds`): their caches merge, and each task's runs stay side by side.

Resumable: each run writes its result file into `--results` (atomically) when it ends; a rerun
skips the runs whose file holds a result and redoes the others (an interrupted run left none).
Before training, two short runs of each task and implementation time its cost per env step
and print the CPU time each run will take (cached beside the results).

Scores: a task's normalised score is (return - random policy's) / (SB3's mean - random's), so
SB3's mean is 1; the random policy's return (uniform random actions, fixed seeds) is measured
once per task and cached. Over the tasks where SB3 beats random: the interquartile mean (IQM)
of ours' (task, seed) scores and of SB3's, and their ratio, each with a stratified-bootstrap
95% interval (seeds resampled within each task, percentile method: rliable's definitions).
Targets (P17, for PPO; printed for SAC as well): every MuJoCo task's score >= 0.9; MuJoCo IQM
ours / SB3 >= 1.5; CPU time ours / SB3 <= 0.5 per task; classic control: ours' mean return >=
SB3's. The table comes from whatever results exist; missing runs are listed.

The simulator's floor: the CPU time per env step of the task's own simulation under random
actions, timed once per task on the machine of the runs and cached (`simulator.json`). Both
implementations pay it per env step, so where it is a large share of SB3's CPU time no
learner can reach a small ratio of totals; the ratio of the CPU spent beyond it says what
each implementation itself costs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import signal
import socket
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import common
from benchmarks.common import BENCHMARK_PACKAGES, base_parser, mean_std, setup, verdict
from benchmarks.env_defaults import EVAL_EPISODES, env_name, experiment, run_ours, run_sb3
from pipelines.files import write_json
from pipelines.params.sections import RuntimeParams
from pipelines.stages.lifeline import stopping_on_sigterm
from rlcore.checkpoint import config_hash
from rlcore.config import EnvConfig
from rlcore.envs import make_env
from rlcore.envs.traits import EnvTraits, measure_traits
from rlcore.presets import DISCRETE_CLASSIC, MUJOCO_SUITE, env_family
from rlcore.runtime import provenance

MUJOCO = tuple(f"{name}-v5" for name in MUJOCO_SUITE)
CLASSIC = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1")
RANDOM_EPISODES = 10
TRAIT_ENVS = 4  # env instances of the traits' random rollout
SIMULATOR_STEPS = 5_000  # random steps that time a task's own simulation
RESAMPLES = 2_000
IMPLS = ("ours", "sb3")
# SB3's defaults that set a probe's size: PPO's n_steps; SAC's learning_starts, then 1,000.
SB3_PROBE = {"ppo": (0, 2048), "sac": (100, 1_000)}
RESULT_KEYS = {"job", "return", "cpu_s", "wall_s", "env_steps", "eval_episodes", "versions"}


@dataclasses.dataclass(frozen=True)
class Job:
    """One training run of the suite."""

    algorithm: str
    env: str
    impl: str
    seed: int
    steps: int

    @property
    def filename(self) -> str:
        return f"{self.algorithm}_{self.env}_{self.impl}_{self.steps}_seed{self.seed}.json"

    def __str__(self) -> str:
        return f"{self.algorithm} {self.env} {self.impl} seed {self.seed} ({self.steps:,d} steps)"


# (job, evaluation episodes) -> a row of `run_ours` / `run_sb3`: return, cpu_s, wall_s, env_steps
Runner = Callable[[Job, int], dict[str, Any]]


def suite_envs(algorithm: str) -> list[str]:
    """The suite's tasks for `algorithm`: all of them for PPO, those with continuous actions
    for SAC."""
    tasks = [*MUJOCO, *CLASSIC]
    return tasks if algorithm == "ppo" else [t for t in tasks if not is_discrete(t)]


def is_discrete(env_id: str) -> bool:
    return env_family(env_name(env_id)) == DISCRETE_CLASSIC


def default_steps(algorithm: str, env_id: str) -> int:
    return 300_000 if algorithm == "ppo" and env_id in MUJOCO else 100_000


def schedule(
    algorithm: str, envs: Sequence[str], seeds: Sequence[int], impls: Sequence[str],
    steps: int | None,
) -> list[Job]:  # fmt: skip
    """Every run, task by task, seed by seed, the implementations taking turns to go first."""
    return [
        Job(algorithm, env, impl, seed, steps or default_steps(algorithm, env))
        for env in envs
        for seed in seeds
        for impl in (impls if seed % 2 == 0 else impls[::-1])
    ]


def train(job: Job, eval_episodes: int) -> dict[str, Any]:
    """Train and evaluate `job` in this process; fail if it changed torch's thread count."""
    threads = torch.get_num_threads()
    run = run_ours if job.impl == "ours" else run_sb3
    row = run(job.env, job.seed, job.steps, algorithm=job.algorithm, eval_episodes=eval_episodes)
    if torch.get_num_threads() != threads:
        raise RuntimeError(f"{job} left torch at {torch.get_num_threads()} threads, not {threads}")
    return row


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None where there is none or not a whole one."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def settings_hash(job: Job) -> str | None:
    """The fingerprint of what `ours` trains for `job` (None for SB3, whose defaults are its
    release's): a result of other settings (the family defaults changed, or whether
    `runtime.compile`'s default compiles it) is no result. An eager run's is its
    experiment's configuration hash alone, as before compiling was the default."""
    if job.impl != "ours":
        return None
    cfg = experiment(job.env, job.steps, job.algorithm)
    compiled, _ = RuntimeParams().compiles(cfg)
    return config_hash(cfg) + ("+compiled" if compiled else "")


def load_result(path: Path, job: Job) -> dict[str, Any] | None:
    """`job`'s finished result in `path`, or None: no file, not a whole result of `job`, or
    one of ours trained with other settings than `job` would train now."""
    data = read_json(path)
    if not isinstance(data, dict) or not data.keys() >= RESULT_KEYS:
        return None
    if data["job"] != dataclasses.asdict(job):
        return None
    return data if data.get("settings") == settings_hash(job) else None


def _alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def claim_path(results: Path, job: Job) -> Path:
    """Where a process marks `job` as running (`claim`)."""
    return results / f"{job.filename}.running"


def claim(results: Path, job: Job) -> str | None:
    """Mark `job` as running here by creating `<its result file>.running` exclusively (host,
    pid, start); None on success, else who holds it. A claim left on this host by a process
    that is gone (killed before it could remove its claim) is taken over; another host's is
    respected (delete the file to run the job here)."""
    path = claim_path(results, job)
    mine = {"host": socket.gethostname(), "pid": os.getpid(),
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            held = read_json(path)
            held = held if isinstance(held, dict) else {}
            pid = held.get("pid")  # none yet: its owner is writing it
            stale = held.get("host") == mine["host"] and isinstance(pid, int) and pid > 0
            stale = stale and not _alive(pid)
            if not stale:
                return f"{held.get('host', '?')} pid {held.get('pid', '?')} ({path.name})"
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as out:
            json.dump(mine, out)
        return None
    return f"another process ({path.name})"


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Let `kill` (SIGTERM), `kill -INT` and Ctrl-C stop the runs inside through Python, so
    that `run_pending` removes its claim before the process goes (a claim left by a killed
    process is taken over only on its own host; it would hold the job on every other host
    sharing the results), and end with one line, not a traceback. A job started with `&`
    from a script inherits SIGINT ignored: the handler is installed again."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stopping_on_sigterm():
            yield
    except KeyboardInterrupt as stop:  # Terminated (SIGTERM) is one
        why = getattr(stop, "reason", "interrupted")
        raise SystemExit(f"suite: {why}; finished runs are kept: run it again to go on") from None


def run_pending(
    jobs: Sequence[Job], results: Path, runner: Runner = train, eval_episodes: int = EVAL_EPISODES
) -> None:
    """Run each job that has no finished result in `results`, writing its result file when it
    ends (atomically: an interrupted run leaves none, and is redone by the next call).

    Each job is looked up again just before it would start, so several processes can share
    one `results` directory (one per core, each given the envs in its own order): a job that
    another process finished in the meantime is skipped, and so is one that another live
    process is running (`claim`).
    """
    results.mkdir(parents=True, exist_ok=True)
    pending = [job for job in jobs if load_result(results / job.filename, job) is None]
    print(f"{len(jobs) - len(pending)} of {len(jobs)} runs done earlier; {len(pending)} to run")
    for i, job in enumerate(pending, 1):
        if (holder := claim(results, job)) is not None:
            print(f"[{i}/{len(pending)}] {job}: running in {holder}, skipped", flush=True)
            continue
        if load_result(results / job.filename, job) is not None:  # looked up while claimed
            claim_path(results, job).unlink(missing_ok=True)
            print(f"[{i}/{len(pending)}] {job}: finished by another process, skipped", flush=True)
            continue
        print(f"[{i}/{len(pending)}] {job}", flush=True)
        try:  # the claim goes once the result is written (or the run failed)
            row = runner(job, eval_episodes)
            result = {
                "job": dataclasses.asdict(job),
                **{key: row[key] for key in ("return", "cpu_s", "wall_s", "env_steps")},
                **({"compiled": row["compiled"]} if "compiled" in row else {}),
                "eval_episodes": eval_episodes,
                "settings": settings_hash(job),
                "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
                "versions": provenance(packages=BENCHMARK_PACKAGES),
            }
            write_json(results / job.filename, result)
        finally:
            claim_path(results, job).unlink(missing_ok=True)
        print(f"  return {row['return']:.1f}, train CPU {row['cpu_s']:.1f} s", flush=True)


def _episode_return(env: Any, seed: int, next_action: Callable[[], Any]) -> float:
    """The return of one episode from `env.reset(seed=seed)`, acting `next_action()`."""
    env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(next_action())
        total, done = total + float(reward), terminated or truncated
    return total


def random_return(env_id: str, episodes: int = RANDOM_EPISODES) -> float:
    """Mean return of uniform random actions over `episodes` episodes, seeds 0, 1, ..."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    try:
        for seed in range(episodes):
            env.action_space.seed(seed)
            returns.append(_episode_return(env, seed, env.action_space.sample))
    finally:
        env.close()
    return statistics.fmean(returns)


def still_return(env_id: str, episodes: int = RANDOM_EPISODES) -> float | None:
    """Mean return of one constant action, the middle of the action box (0 for MuJoCo's
    symmetric torques: the body goes limp), over `episodes` episodes, seeds 0, 1, ...; None
    for a discrete action space, where no action means "do nothing". A score can look like
    learning where this alone beats the reference: Ant-v5 pays ~1 per step for staying
    upright, so lying still returns ~990 over 1,000 steps."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        space = env.action_space
        if not isinstance(space, gym.spaces.Box):
            return None
        bounded = np.isfinite(space.low) & np.isfinite(space.high)
        middle = np.where(bounded, (space.low + space.high) / 2, 0.0).astype(space.dtype)
        returns = [_episode_return(env, seed, lambda: middle) for seed in range(episodes)]
        return statistics.fmean(returns)
    finally:
        env.close()


def simulator_cost(env_id: str, steps: int = SIMULATOR_STEPS) -> float:
    """CPU seconds per env step of the task's own simulation (one Gymnasium env, actions
    drawn uniformly beforehand, reset where an episode ends): a floor that every
    implementation pays per env step, whatever it learns and however fast."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(steps)]
        start = time.process_time()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return (time.process_time() - start) / steps
    finally:
        env.close()


def cached(path: Path, keys: Sequence[str], measure: Callable[[str], Any]) -> dict[str, Any]:
    """`measure(key)` for each of `keys`, kept in the JSON file `path` across runs. Each
    write merges what the file holds by then: processes sharing `--results` (one per core,
    each with its own `--envs`) keep each other's entries."""
    found = _json_dict(path)
    missing = [key for key in keys if key not in found]
    for key in missing:
        value = measure(key)
        found = _json_dict(path) | found | {key: value}
        write_json(path, found)
    return {key: found[key] for key in keys}


def _json_dict(path: Path) -> dict[str, Any]:
    found = read_json(path)
    return found if isinstance(found, dict) else {}


def probe_sizes(job: Job) -> tuple[int, int]:
    """Two short budgets whose difference is one unit of steady training after the random
    warm-up: a PPO iteration (and its update), or about 1,000 SAC env steps."""
    if job.impl == "sb3":
        warmup, unit = SB3_PROBE[job.algorithm]
        return warmup + unit, warmup + 2 * unit
    cfg = experiment(job.env, job.steps, job.algorithm)
    per_iter = cfg.steps_per_iter
    if job.algorithm == "ppo":
        return per_iter, 2 * per_iter
    unit = max(1_000 // per_iter, 1) * per_iter
    warmup = -(-cfg.replay.warmup_steps // per_iter) * per_iter
    return warmup + unit, warmup + 2 * unit


def estimate(job: Job, runner: Runner = train) -> dict[str, float] | None:
    """Training CPU seconds of `job`, extrapolated from two short runs of it (their difference
    is the steady cost per env step, without the setup); None where the job is that short."""
    short, longer = probe_sizes(job)
    if job.steps <= longer:
        return None
    a, b = (runner(dataclasses.replace(job, steps=n), 1) for n in (short, longer))
    per_step = (b["cpu_s"] - a["cpu_s"]) / (b["env_steps"] - a["env_steps"])
    if per_step <= 0:  # the machine's noise beat the difference
        per_step = b["cpu_s"] / b["env_steps"]
    return {
        "steps_per_cpu_s": 1 / per_step,
        "cpu_s": b["cpu_s"] + per_step * (job.steps - b["env_steps"]),
    }


def print_estimates(jobs: Sequence[Job], results: Path, runner: Runner = train) -> None:
    """Print the estimated training CPU time of each task and implementation with runs to do."""
    pending: dict[str, list[Job]] = {}
    for job in jobs:
        if load_result(results / job.filename, job) is None:
            pending.setdefault(f"{job.algorithm} {job.env} {job.impl} {job.steps}", []).append(job)
    if not pending:
        return
    print(f"timing {len(pending)} tasks x implementations, two short runs each (cached):")
    found = cached(
        results / "estimates.json", list(pending), lambda key: estimate(pending[key][0], runner)
    )
    total = 0.0
    for key, runs in pending.items():
        if (est := found[key]) is None:
            print(f"  {key}: no estimate (no longer than its probes)")
            continue
        total += est["cpu_s"] * len(runs)
        print(f"  {key}: {est['steps_per_cpu_s']:,.0f} env steps per CPU s, "
              f"~{est['cpu_s'] / 60:.1f} CPU min per run, {len(runs)} to run")  # fmt: skip
    print(f"estimated training CPU time of the runs to do: {total / 3600:.2f} h (evaluation "
          "excluded; a busy machine takes longer in wall time)")  # fmt: skip


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean along the last axis: the mean of the sorted scores with int(n / 4)
    cut from each end (rliable's IQM, scipy's `trim_mean(scores, 0.25)`)."""
    n = scores.shape[-1]
    cut = int(0.25 * n)
    return np.sort(scores, axis=-1)[..., cut : n - cut].mean(axis=-1)


def stratified_resamples(
    strata: Sequence[np.ndarray], reps: int, rng: np.random.Generator
) -> np.ndarray:
    """`reps` bootstrap resamples of all scores, each stratum (a task's seeds) resampled with
    replacement within itself, so every resample holds each task as often as the data.

    Shape: strata (n_i,) -> (reps, sum of n_i).
    """
    return np.concatenate([s[rng.integers(0, len(s), size=(reps, len(s)))] for s in strata], 1)


def interval(samples: np.ndarray, size: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval: the middle `size` of the resampled statistic."""
    low, high = np.percentile(samples, [50 * (1 - size), 50 * (1 + size)])
    return float(low), float(high)


def normalised(ret: float, random: float, sb3_mean: float) -> float:
    """(return - random's) / (SB3's mean - random's); NaN where SB3 was no better than random."""
    span = sb3_mean - random
    return (ret - random) / span if span > 0 else math.nan


@dataclasses.dataclass(frozen=True)
class Task:
    """A task's finished runs: return and training CPU seconds per seed, by implementation."""

    env: str
    steps: int
    random: float
    returns: dict[str, list[float]]
    cpu_s: dict[str, list[float]]

    def mean(self, impl: str) -> float:
        runs = self.returns.get(impl, [])
        return statistics.fmean(runs) if runs else math.nan

    def scores(self, impl: str) -> np.ndarray:
        sb3 = self.mean("sb3")
        return np.array([normalised(r, self.random, sb3) for r in self.returns.get(impl, [])])

    def cpu_ratio(self) -> float:
        ours, sb3 = self.cpu_s.get("ours", []), self.cpu_s.get("sb3", [])
        return statistics.fmean(ours) / statistics.fmean(sb3) if ours and sb3 else math.nan

    def scored(self) -> bool:
        ours, sb3 = self.scores("ours"), self.scores("sb3")
        return bool(ours.size and sb3.size and np.isfinite(sb3).all())


def collect(jobs: Sequence[Job], results: Path, randoms: dict[str, float]) -> list[Task]:
    """The finished runs of `jobs`, task by task (in the jobs' order)."""
    tasks: dict[str, Task] = {}
    for job in jobs:
        task = tasks.setdefault(job.env, Task(job.env, job.steps, randoms[job.env], {}, {}))
        if (found := load_result(results / job.filename, job)) is not None:
            task.returns.setdefault(job.impl, []).append(found["return"])
            task.cpu_s.setdefault(job.impl, []).append(found["cpu_s"])
    return list(tasks.values())


def aggregate(tasks: Sequence[Task], rng: np.random.Generator) -> dict[str, Any] | None:
    """IQM of ours' and SB3's normalised scores and their ratio, each with its stratified
    bootstrap interval; the share of tasks where ours' mean score is >= 0.9; CPU ours / SB3."""
    tasks = [task for task in tasks if task.scored()]
    if not tasks:
        return None
    ours, sb3 = ([task.scores(impl) for task in tasks] for impl in ("ours", "sb3"))
    point = [float(iqm(np.concatenate(scores))) for scores in (ours, sb3)]
    draws = [iqm(stratified_resamples(scores, RESAMPLES, rng)) for scores in (ours, sb3)]
    cpu = [sum(statistics.fmean(t.cpu_s[impl]) for t in tasks) for impl in ("ours", "sb3")]
    return {
        "tasks": len(tasks),
        "iqm_ours": (point[0], *interval(draws[0])),
        "iqm_sb3": (point[1], *interval(draws[1])),
        "iqm_ratio": (point[0] / point[1], *interval(draws[0] / draws[1])),
        "share_at_0.9": sum(float(np.mean(s)) >= 0.9 for s in ours) / len(tasks),
        "cpu_ratio": cpu[0] / cpu[1],
    }


def returns_cell(task: Task, impl: str, seeds: int) -> str:
    runs = task.returns.get(impl, [])
    if not runs:
        return "-"
    mean, spread = mean_std(runs)
    text = f"{mean:,.1f} ± {spread:,.1f}"
    return text if len(runs) == seeds else f"{text} ({len(runs)}/{seeds} seeds)"


def print_tasks(tasks: Sequence[Task], seeds: int) -> None:
    """Per task: returns, the random policy's, ours' normalised score, CPU time, targets."""
    print("| task (env steps) | ours return | SB3 return | random | ours' score (SB3 = 1) "
          "| train CPU s ours / SB3 | targets: return; CPU <= 0.5x |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for task in tasks:
        score = float(np.mean(task.scores("ours"))) if task.scored() else math.nan
        cpu = [statistics.fmean(task.cpu_s[i]) if i in task.cpu_s else math.nan for i in IMPLS]
        if task.env in MUJOCO:
            target = f"score >= 0.9 {verdict(score, 0.9, True)}"
        else:
            target = f">= SB3's {verdict(task.mean('ours') - task.mean('sb3'), 0.0, True)}"
        print(
            f"| {task.env} ({task.steps:,d}) | {returns_cell(task, 'ours', seeds)} | "
            f"{returns_cell(task, 'sb3', seeds)} | {task.random:,.1f} | {score:.2f} | "
            f"{cpu[0]:,.1f} / {cpu[1]:,.1f} = {task.cpu_ratio():.2f} | "
            f"{target}; {verdict(task.cpu_ratio(), 0.5, False)} |"
        )


def env_traits(env_id: str) -> dict[str, Any]:
    """The task's traits (`rlcore.envs.traits`) as JSON: what a family split may read."""
    env = make_env(EnvConfig(env_name(env_id), num_envs=TRAIT_ENVS))
    try:
        return dataclasses.asdict(measure_traits(env))
    finally:
        env.close()


def print_traits(
    tasks: Sequence[Task], traits: dict[str, dict[str, Any]], stills: dict[str, float | None]
) -> None:
    """Per task its traits beside ours' score: where the defaults fail, what those envs
    share; and the return of a constant mid-range action, which no learner should need
    credit for (where it beats both implementations, neither has learned much yet)."""
    print("| task | obs | actions | episodes end | random reward per step | "
          "return of a constant mid-range action | ours' score |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for task in tasks:
        still = stills.get(task.env)
        still_cell = "-" if still is None else f"{still:,.1f}"
        t = EnvTraits(**traits[task.env])
        ends = "early (terminated)" if t.terminates_early else "at the time limit"
        kind = "discrete" if t.discrete else "continuous"
        score = float(np.mean(task.scores("ours"))) if task.scored() else math.nan
        print(
            f"| {task.env} | {t.obs_size} | {t.action_size} {kind} | {ends} | "
            f"{t.reward_mean:.3g} ± {t.reward_std:.3g} | {still_cell} | {score:.2f} |"
        )


def beyond_floor(ours_s: float, sb3_s: float, floor_s: float) -> float:
    """Train CPU ours / SB3's with the simulator's floor taken from both: the ratio of what
    the implementations themselves spend (NaN where SB3 spent no more than the floor)."""
    return (ours_s - floor_s) / (sb3_s - floor_s) if sb3_s > floor_s else math.nan


def print_simulator(tasks: Sequence[Task], seconds_per_step: dict[str, float]) -> None:
    """Per task the simulator's CPU floor at the task's budget, its share of SB3's train CPU
    (a ratio of totals cannot fall below it), and the CPU ratio beyond it."""
    print("| task | simulator CPU µs per env step (random actions) | floor at the budget, s | "
          "floor / SB3's train CPU | train CPU beyond the floor, ours / SB3 |")  # fmt: skip
    print("|---|---|---|---|---|")
    for task in tasks:
        if not (task.cpu_s.get("ours") and task.cpu_s.get("sb3")):
            continue
        floor = seconds_per_step[task.env] * task.steps
        ours, sb3 = (statistics.fmean(task.cpu_s[impl]) for impl in IMPLS)
        print(
            f"| {task.env} | {seconds_per_step[task.env] * 1e6:,.1f} | {floor:,.1f} | "
            f"{floor / sb3:.2f} | {beyond_floor(ours, sb3, floor):.2f} |"
        )


def print_aggregates(tasks: Sequence[Task], rng: np.random.Generator) -> dict[str, Any]:
    """The aggregates of the MuJoCo tasks, the classic-control ones and the whole suite."""
    groups = {
        "MuJoCo": [task for task in tasks if task.env in MUJOCO],
        "classic control": [task for task in tasks if task.env not in MUJOCO],
    }
    if all(groups.values()):  # both families: the whole suite as well
        groups["suite"] = list(tasks)
    print("\n| tasks | IQM of scores, ours [95% CI] | SB3 | IQM ours / SB3 | tasks with ours' "
          "score >= 0.9 | train CPU ours / SB3 (sums) |\n|---|---|---|---|---|---|")  # fmt: skip
    found = {}
    for name, group in groups.items():
        if not group or (agg := aggregate(group, rng)) is None:
            continue
        found[name] = agg
        o, s, r = (agg[key] for key in ("iqm_ours", "iqm_sb3", "iqm_ratio"))
        target = f" (>= 1.5 {verdict(r[0], 1.5, True)})" if name == "MuJoCo" else ""
        print(
            f"| {name} ({agg['tasks']}) | {o[0]:.2f} [{o[1]:.2f}, {o[2]:.2f}] | {s[0]:.2f} "
            f"[{s[1]:.2f}, {s[2]:.2f}] | {r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]{target} | "
            f"{agg['share_at_0.9']:.0%} | {agg['cpu_ratio']:.2f} |"
        )
    return found


def print_gaps(jobs: Sequence[Job], results: Path, tasks: Sequence[Task]) -> None:
    """Name the runs without a result and the tasks left out of the aggregates."""
    missing: dict[str, list[str]] = {}
    for job in jobs:
        if load_result(results / job.filename, job) is None:
            missing.setdefault(f"{job.env} {job.impl}", []).append(str(job.seed))
    for key, seeds in missing.items():
        print(f"missing: {key} seeds {' '.join(seeds)}")
    for task in tasks:
        if not task.scored():
            print(f"not scored: {task.env} (SB3's mean {task.mean('sb3'):.1f}, random "
                  f"{task.random:.1f}: no SB3 runs, none of ours, or SB3 no better)")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=["ppo", "sac"], default="ppo")
    parser.add_argument("--envs", nargs="+", help="Gymnasium ids (default: the whole suite)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument(
        "--steps", type=int, help="env steps per run (default: PPO 300k on MuJoCo, 100k on "
        "classic control; SAC 100k)"
    )  # fmt: skip
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--results", type=Path, help="default: benchmarks/results/suite-<alg>/")
    parser.add_argument("--report-only", action="store_true", help="train nothing")
    parser.add_argument("--estimate-only", action="store_true", help="time, then stop")
    args = parser.parse_args(argv)
    for flag, value in (("--steps", args.steps), ("--eval-episodes", args.eval_episodes)):
        if value is not None and value <= 0:
            parser.error(f"{flag} must be a positive integer, got {value}")
    args.envs = args.envs or suite_envs(args.algorithm)
    if args.algorithm == "sac" and (discrete := [e for e in args.envs if is_discrete(e)]):
        parser.error(f"--envs: SAC needs continuous actions, which {', '.join(discrete)} lack")
    args.results = args.results or Path(__file__).parent / "results" / f"suite-{args.algorithm}"
    return args


def installed(envs: list[str], impls: list[str]) -> tuple[list[str], list[str]]:
    """The tasks and implementations whose packages are installed, with a note on the rest."""
    if importlib.util.find_spec("mujoco") is None and (no := [e for e in envs if e in MUJOCO]):
        print(f'note: mujoco is not installed (pip install -e ".[mujoco]"); skipping {no}')
        envs = [env for env in envs if env not in no]
    if importlib.util.find_spec("stable_baselines3") is None and "sb3" in impls:
        print('note: stable-baselines3 is not installed (pip install -e ".[bench]"): ours alone')
        impls = [impl for impl in impls if impl != "sb3"]
    return envs, impls


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    envs, impls = installed(args.envs, args.impls)
    meta = setup(args, f"suite: {args.algorithm}, only env.name vs SB3's defaults",
                 method=f"seeds {args.seeds}; results in {args.results}")  # fmt: skip
    jobs = schedule(args.algorithm, envs, args.seeds, impls, args.steps)
    randoms = cached(args.results / "random.json", envs, random_return)
    if not args.report_only:
        print_estimates(jobs, args.results)
        if args.estimate_only:
            return
        with stoppable():
            run_pending(jobs, args.results, eval_episodes=args.eval_episodes)
    tasks = collect(jobs, args.results, randoms)
    print()
    print_tasks(tasks, len(args.seeds))
    print()
    traits = cached(args.results / "traits.json", envs, env_traits)
    print_traits(tasks, traits, cached(args.results / "still.json", envs, still_return))
    print()
    print_simulator(tasks, cached(args.results / "simulator.json", envs, simulator_cost))
    aggregates = print_aggregates(tasks, np.random.default_rng(0))
    print_gaps(jobs, args.results, tasks)
    common.write_json(args.json, meta, {"tasks": [dataclasses.asdict(t) for t in tasks],
                                        "aggregates": aggregates})  # fmt: skip


if __name__ == "__main__":
    main()
