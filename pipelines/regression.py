"""The nightly regression check: the committed experiment again, on fresh seeds, judged.

A schedule that re-runs `dvc repro` with nothing changed is a no-op that republishes old
results. The check instead runs the experiment as a new, dated DVC experiment on seeds no
run has used (`dvc exp run --temp`: the workspace keeps the baseline's params, lock and
outputs) and compares its final metrics over seeds with the committed baseline's seed band,
the range (min to max) that the baseline's own seeds span:

- the headline metric: evaluation success rate where the env reports it, else return;
- env steps trained, where a stop target is set (then fewer steps means faster learning).

The nightly mean inside the band, or beyond it on the good side, passes; beyond it on the bad
side is a regression. Wall time is shown on the compare page but not judged: it measures
the machine as much as the code. This module reads runs and judges them; running DVC and
publishing belong to the flow (`pipelines.flows.regression_flow`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime

from pipelines.aggregate import FINAL_METRICS, FinalMetric, summarize
from pipelines.runs import Run

METRICS = {metric.key: metric for metric in FINAL_METRICS}
SEEDS_PER_DAY = 100  # fresh seeds are YYYYMMDD * 100 + k


def nightly_name(now: datetime) -> str:
    """The DVC experiment's name: dated to the minute, so two runs a day do not collide."""
    return f"nightly-{now:%Y%m%d-%H%M}"


def fresh_seeds(count: int, day: date) -> list[int]:
    """`count` training seeds of `day` (2026112300, 2026112301, ...): never the baseline's
    small seeds, and different every day."""
    if not 0 < count <= SEEDS_PER_DAY:
        raise ValueError(f"seeds: a regression check runs 1 to {SEEDS_PER_DAY}, got {count}")
    return [int(f"{day:%Y%m%d}") * SEEDS_PER_DAY + k for k in range(count)]


@dataclass(frozen=True)
class Check:
    """One metric: the nightly mean against the baseline's seed range."""

    metric: FinalMetric
    value: float
    low: float
    high: float
    higher_is_better: bool

    @property
    def status(self) -> str:
        """`within` the band, or `better` / `worse` than it."""
        if self.low <= self.value <= self.high:
            return "within"
        above = self.value > self.high
        return "better" if above == self.higher_is_better else "worse"

    def describe(self) -> str:
        spec = self.metric.spec
        band = f"[{self.low:{spec}}, {self.high:{spec}}]"
        where = {"within": "in", "better": "better than", "worse": "worse than"}[self.status]
        return f"{self.metric.label} {self.value:{spec}} {where} {band}"


@dataclass(frozen=True)
class Verdict:
    """The checks of one nightly run, or the problems that kept it from being judged."""

    nightly: str
    baseline: str
    checks: tuple[Check, ...]
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.status != "worse" for c in self.checks)

    def headline(self) -> str:
        """The artifact's first line: the verdict and why."""
        if self.problems:
            return f"NOT JUDGED: {self.nightly}: {'; '.join(self.problems)}"
        details = "; ".join(c.describe() for c in self.checks)
        if not self.passed:
            return f"REGRESSION: {self.nightly} vs the {self.baseline} seed band: {details}"
        return f"PASS: {self.nightly} within the {self.baseline} seed band or better: {details}"


def _has_stop_target(run: Run) -> bool:
    trainer = (run.params or {}).get("trainer") or {}
    return any(
        trainer.get(key) is not None for key in ("stop_at_eval_return", "stop_at_eval_success")
    )


def judged_metrics(baseline: Run) -> list[tuple[FinalMetric, bool]]:
    """(metric, higher is better) for the metrics the verdict rests on."""
    has_success = any(s.final(METRICS["success_rate"]) is not None for s in baseline.seeds)
    metrics = [(METRICS["success_rate" if has_success else "eval_return"], True)]
    if _has_stop_target(baseline):
        metrics.append((METRICS["env_steps"], False))
    return metrics


def judge(baseline: Run, nightly: Run) -> Verdict:
    """Each judged metric's nightly mean over seeds against the baseline seeds' range."""
    problems = [f"{run.label}: {p}" for run in (baseline, nightly) for p in run.problems]
    for run in (baseline, nightly):
        problems += [f"{run.label}: seed {s.seed}: {p}" for s in run.seeds for p in s.problems]
    if problems:
        return Verdict(nightly.label, baseline.label, (), tuple(problems))
    stats = summarize(nightly.seeds)
    checks = []
    for metric, higher_is_better in judged_metrics(baseline):
        values = [v for s in baseline.seeds if (v := s.final(metric)) is not None]
        stat = stats.get(metric.key)
        if not values or stat is None or math.isnan(stat.mean):
            problems.append(f"{metric.label}: missing from one of the runs")
            continue
        checks.append(Check(metric, stat.mean, min(values), max(values), higher_is_better))
    return Verdict(nightly.label, baseline.label, tuple(checks), tuple(problems))


def verdict_markdown(verdict: Verdict, compare_page: str) -> str:
    """The artifact: the verdict's line first, then each check, then where the page is."""
    rows = "\n".join(
        f"| {c.metric.label} | {c.value:{c.metric.spec}} | {c.low:{c.metric.spec}} | "
        f"{c.high:{c.metric.spec}} | {c.status} |"
        for c in verdict.checks
    )
    table = (
        "| metric | nightly mean | baseline min | baseline max | verdict |\n"
        "|---|---|---|---|---|\n" + rows
        if rows
        else ""
    )
    return f"""{verdict.headline()}

{table}

Every seed and metric of both runs: {compare_page}
"""
