"""The suite's runs: the jobs, their result files, and whether one is finished."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.env_defaults import env_name, experiment, run_ours, run_sb3
from pipelines.params.sections import RuntimeParams
from rlcore.checkpoint import config_hash
from rlcore.presets import DISCRETE_CLASSIC, MUJOCO_SUITE, env_family

MUJOCO = tuple(f"{name}-v5" for name in MUJOCO_SUITE)
CLASSIC = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1")
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


FAMILIES = {"mujoco": MUJOCO, "classic": CLASSIC}


def suite_envs(algorithm: str, family: str | None = None) -> list[str]:
    """The suite's tasks for `algorithm` (of one `family`, or all): all of them for PPO,
    those with continuous actions for SAC."""
    tasks = [*FAMILIES[family]] if family else [*MUJOCO, *CLASSIC]
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
