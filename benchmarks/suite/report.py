"""The suite's tables (markdown, as benchmarks/README.md holds them)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import mean_std, verdict
from benchmarks.suite.jobs import IMPLS, MUJOCO, Job, load_result
from benchmarks.suite.scores import Task, aggregate
from rlcore.envs.traits import EnvTraits


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
        cpu_cell = f"{cpu[0]:,.1f} / {cpu[1]:,.1f} = {task.cpu_ratio():.2f}"
        cpu_verdict = verdict(task.cpu_ratio(), 0.5, False)
        if not task.side_by_side():
            cpu_cell += f" ({machines_text(task)}: not side by side)"
            cpu_verdict = "-"
        print(
            f"| {task.env} ({task.steps:,d}) | {returns_cell(task, 'ours', seeds)} | "
            f"{returns_cell(task, 'sb3', seeds)} | {task.random:,.1f} | {score:.2f} | "
            f"{cpu_cell} | {target}; {cpu_verdict} |"
        )


def machines_text(task: Task) -> str:
    """The kinds of CPU each implementation's runs of `task` trained on, in words."""
    names = {"ours": "ours", "sb3": "SB3"}
    return "; ".join(
        f"{names.get(impl, impl)} on {', '.join(kinds)}" for impl, kinds in task.machines.items()
    )


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
        mixed = "" if task.side_by_side() else " (not side by side)"
        print(
            f"| {task.env} | {seconds_per_step[task.env] * 1e6:,.1f} | {floor:,.1f} | "
            f"{floor / sb3:.2f} | {beyond_floor(ours, sb3, floor):.2f}{mixed} |"
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
        cpu = f"{agg['cpu_ratio']:.2f}"
        if agg["cpu_tasks"] < agg["tasks"]:
            cpu += f" (the {agg['cpu_tasks']} tasks side by side on one kind of CPU)"
        print(
            f"| {name} ({agg['tasks']}) | {o[0]:.2f} [{o[1]:.2f}, {o[2]:.2f}] | {s[0]:.2f} "
            f"[{s[1]:.2f}, {s[2]:.2f}] | {r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]{target} | "
            f"{agg['share_at_0.9']:.0%} | {cpu} |"
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
