"""The nightly regression check: the committed experiment again, on fresh seeds, judged.

A schedule that re-runs `dvc repro` with nothing changed is a no-op that republishes old
results. The check instead runs the experiment as a new, dated DVC experiment on seeds no
run has used (`dvc exp run --temp`: the workspace keeps the baseline's params, lock and
outputs) and compares its final metrics, seed by seed, with the committed baseline's:

- the headline metric: evaluation success rate where the env reports it, else return;
- env steps trained, where a stop target is set (then more steps means slower learning).

The baseline's seed band (min to max over its seeds) is shown, but it is not the test: with
3 seeds a side, a fresh run of unchanged code lands below it 18% of the time (simulated with
normal seeds; docs/guide.md has a real nightly run that did). A metric regresses when the
nightly mean is worse than the baseline's by more than chance explains: a one-sided Welch
t-test over the two runs' seeds, p < `ALPHA`. With 3 seeds a side that flags unchanged code
~1% of the time per metric, and a shift of 4 seed standard deviations ~2 times in 3 (6: 9 in
10); more seeds detect smaller shifts. Wall time is shown on the compare page but not
judged: it measures the machine as much as the code. This module reads runs and judges them;
running DVC and publishing belong to the flow
(`pipelines.orchestration.flows.regression_flow`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime
from functools import cached_property

import numpy as np

from pipelines.compare.aggregate import FINAL_METRICS, FinalMetric
from pipelines.compare.runs import Run

METRICS = {metric.key: metric for metric in FINAL_METRICS}
SEEDS_PER_DAY = 100  # fresh seeds are YYYYMMDD * 100 + k
ALPHA = 0.01  # a metric regresses below this p-value


def nightly_name(now: datetime) -> str:
    """The DVC experiment's name: dated to the minute, so two runs a day do not collide."""
    return f"nightly-{now:%Y%m%d-%H%M}"


def fresh_seeds(count: int, day: date) -> list[int]:
    """`count` training seeds of `day` (2026112300, 2026112301, ...): never the baseline's
    small seeds, and different every day."""
    if not 0 < count <= SEEDS_PER_DAY:
        raise ValueError(f"seeds: a regression check runs 1 to {SEEDS_PER_DAY}, got {count}")
    return [int(f"{day:%Y%m%d}") * SEEDS_PER_DAY + k for k in range(count)]


def t_tail(t: float, df: float, intervals: int = 2000) -> float:
    """P(T >= t) for Student's t with `df` >= 1 degrees of freedom (real-valued).

    Simpson's rule on the density in theta = arctan(t / sqrt(df)), where it is
    c sqrt(df) cos(theta)^(df - 1): smooth and bounded on [0, pi/2) for any t.
    """
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    end = math.atan(abs(t) / math.sqrt(df))
    h = end / intervals
    weights = (1 if i in (0, intervals) else 4 if i % 2 else 2 for i in range(intervals + 1))
    area = sum(w * math.cos(i * h) ** (df - 1) for i, w in enumerate(weights)) * h / 3
    half = c * math.sqrt(df) * area  # P(0 <= T <= |t|)
    return 0.5 - half if t >= 0 else 0.5 + half


def worse_p(baseline: list[float], nightly: list[float], higher_is_better: bool) -> float:
    """One-sided Welch t-test: the p-value of the nightly mean being this much worse."""
    sign = 1.0 if higher_is_better else -1.0
    b, n = np.asarray(baseline, float) * sign, np.asarray(nightly, float) * sign
    if b.size < 2 or n.size < 2:
        raise ValueError("a regression check needs at least 2 seeds in each run")
    vb, vn = b.var(ddof=1) / b.size, n.var(ddof=1) / n.size
    gap = float(b.mean() - n.mean())  # > 0: the nightly run is worse
    if vb + vn == 0:  # every seed alike on both sides
        return 0.0 if gap > 0 else 1.0
    df = (vb + vn) ** 2 / (vb**2 / (b.size - 1) + vn**2 / (n.size - 1))
    return t_tail(gap / math.sqrt(vb + vn), max(df, 1.0))


@dataclass(frozen=True)
class Check:
    """One metric: the nightly seeds against the baseline's."""

    metric: FinalMetric
    baseline: tuple[float, ...]
    nightly: tuple[float, ...]
    higher_is_better: bool

    @property
    def value(self) -> float:
        return float(np.mean(self.nightly))

    @cached_property  # read by `status` and `describe`: one t-test per check
    def p(self) -> float:
        return worse_p(list(self.baseline), list(self.nightly), self.higher_is_better)

    @property
    def status(self) -> str:
        """`regression` (worse beyond chance), or where the mean lies: `within` the
        baseline's seed band, `better` or `below band` (worse, within chance)."""
        if self.p < ALPHA:
            return "regression"
        low, high = min(self.baseline), max(self.baseline)
        if low <= self.value <= high:
            return "within"
        return "better" if (self.value > high) == self.higher_is_better else "below band"

    def describe(self) -> str:
        spec = self.metric.spec
        band = f"{min(self.baseline):{spec}}-{max(self.baseline):{spec}}"
        return f"{self.metric.label} {self.value:{spec}} (baseline seeds {band}, p {self.p:.2g})"


@dataclass(frozen=True)
class Verdict:
    """The checks of one nightly run, or the problems that kept it from being judged."""

    nightly: str
    baseline: str
    checks: tuple[Check, ...]
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.status != "regression" for c in self.checks)

    def headline(self) -> str:
        """The artifact's first line: the verdict and why."""
        if self.problems:
            return f"NOT JUDGED: {self.nightly}: {'; '.join(self.problems)}"
        details = "; ".join(c.describe() for c in self.checks)
        if not self.passed:
            worse = ", ".join(c.metric.label for c in self.checks if c.status == "regression")
            return f"REGRESSION ({worse}): {self.nightly} vs {self.baseline}: {details}"
        return f"PASS: {self.nightly} vs {self.baseline}, nothing worse beyond chance: {details}"


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
    """Each judged metric, nightly seeds against the baseline's (see the module docstring)."""
    problems = [f"{run.label}: {p}" for run in (baseline, nightly) for p in run.problems]
    for run in (baseline, nightly):
        problems += [f"{run.label}: seed {s.seed}: {p}" for s in run.seeds for p in s.problems]
    base = baseline.label
    if baseline.source.kind == "commit" and baseline.source.rev and "(" not in base:
        base = f"{base} ({baseline.source.rev[:7]})"  # HEAD -> HEAD (1a2b3c4)
    if problems:
        return Verdict(nightly.label, base, (), tuple(problems))
    checks = []
    for metric, higher_is_better in judged_metrics(baseline):
        values = [
            tuple(v for s in run.seeds if (v := s.final(metric)) is not None)
            for run in (baseline, nightly)
        ]
        if min(map(len, values)) < 2:
            problems.append(f"{metric.label}: fewer than 2 seeds with it in one of the runs")
            continue
        checks.append(Check(metric, values[0], values[1], higher_is_better))
    return Verdict(nightly.label, base, tuple(checks), tuple(problems))


def verdict_markdown(verdict: Verdict, compare_page: str) -> str:
    """The artifact: the verdict's line first, then each check, then where the page is."""
    rows = "\n".join(
        f"| {c.metric.label} | {c.value:{c.metric.spec}} | "
        f"{min(c.baseline):{c.metric.spec}} - {max(c.baseline):{c.metric.spec}} | "
        f"{c.p:.2g} | {c.status} |"
        for c in verdict.checks
    )
    table = (
        "| metric | nightly mean | baseline seeds | p (worse by chance) | verdict |\n"
        "|---|---|---|---|---|\n" + rows
        if rows
        else ""
    )
    return f"""{verdict.headline()}

{table}

A regression is a nightly mean worse than the baseline's with p < {ALPHA:g} (one-sided
Welch t-test over the seeds). Every seed and metric of both runs: {compare_page}
"""
