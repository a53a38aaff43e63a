"""Estimates of each run's training CPU time from two short runs of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from benchmarks.env_defaults import experiment
from benchmarks.suite.jobs import Job, Runner, load_result, train
from benchmarks.suite.references import cached

# SB3's defaults that set a probe's size: PPO's n_steps; SAC's learning_starts, then 1,000.
SB3_PROBE = {"ppo": (0, 2048), "sac": (100, 1_000)}


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
