"""Normalised scores and their aggregates: rliable's IQM with stratified-bootstrap intervals."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.suite.jobs import Job, load_result

RESAMPLES = 2_000


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


def machine(result: dict[str, Any]) -> str:
    """The kind of CPU a result trained on, as its provenance names it ("AMD EPYC AVX512")."""
    versions = result.get("versions") or {}
    return f"{versions.get('cpu', 'unknown CPU')} {versions.get('cpu_kernels', '')}".strip()


@dataclasses.dataclass(frozen=True)
class Task:
    """A task's finished runs: return and training CPU seconds per seed, and the kinds of
    CPU they trained on, by implementation."""

    env: str
    steps: int
    random: float
    returns: dict[str, list[float]]
    cpu_s: dict[str, list[float]]
    machines: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def mean(self, impl: str) -> float:
        runs = self.returns.get(impl, [])
        return statistics.fmean(runs) if runs else math.nan

    def scores(self, impl: str) -> np.ndarray:
        sb3 = self.mean("sb3")
        return np.array([normalised(r, self.random, sb3) for r in self.returns.get(impl, [])])

    def side_by_side(self) -> bool:
        """Whether all of the task's runs trained on one kind of CPU: a CPU ratio across
        machines measures the machines as much as the implementations."""
        return len({kind for kinds in self.machines.values() for kind in kinds}) <= 1

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
            kinds, kind = task.machines.setdefault(job.impl, []), machine(found)
            if kind not in kinds:
                kinds.append(kind)
    return list(tasks.values())


def aggregate(tasks: Sequence[Task], rng: np.random.Generator) -> dict[str, Any] | None:
    """IQM of ours' and SB3's normalised scores and their ratio, each with its stratified
    bootstrap interval; the share of tasks where ours' mean score is >= 0.9; CPU ours / SB3
    summed over the tasks whose runs all trained on one kind of CPU (`cpu_tasks` of them)."""
    tasks = [task for task in tasks if task.scored()]
    if not tasks:
        return None
    ours, sb3 = ([task.scores(impl) for task in tasks] for impl in ("ours", "sb3"))
    point = [float(iqm(np.concatenate(scores))) for scores in (ours, sb3)]
    draws = [iqm(stratified_resamples(scores, RESAMPLES, rng)) for scores in (ours, sb3)]
    timed = [task for task in tasks if task.side_by_side()]
    cpu = [sum(statistics.fmean(t.cpu_s[impl]) for t in timed) for impl in ("ours", "sb3")]
    return {
        "tasks": len(tasks),
        "iqm_ours": (point[0], *interval(draws[0])),
        "iqm_sb3": (point[1], *interval(draws[1])),
        "iqm_ratio": (point[0] / point[1], *interval(draws[0] / draws[1])),
        "share_at_0.9": sum(float(np.mean(s)) >= 0.9 for s in ours) / len(tasks),
        "cpu_ratio": cpu[0] / cpu[1] if timed else math.nan,
        "cpu_tasks": len(timed),
    }
