"""One experiment's seeds: their result files read tolerantly, and statistics over seeds.

Shared by the `report` stage (this checkout's experiment) and `compare` (many experiments,
read from git revisions). Files are read through a `Reader` (path -> text, or None when the
file does not exist), so the same code reads the workspace and any revision. A missing or
malformed file never raises here: it becomes a `problem` of its seed, and that seed is left
out of the statistics.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.bounded import BoundedInputError, load_json
from pipelines.layout import Layout

Reader = Callable[[str], "str | None"]

CURVE_REQUIRED = ("env_steps", "wall_s", "eval_return")


@dataclass(frozen=True)
class FinalMetric:
    """A final metric of a run: where it is read from and how it is shown."""

    key: str
    label: str
    source: str  # "train" or "evaluation"
    field: str
    spec: str  # format spec of the value


FINAL_METRICS = (
    FinalMetric("eval_return", "evaluation return", "evaluation", "return_mean", ",.1f"),
    FinalMetric("success_rate", "success rate", "evaluation", "success_rate", ".2f"),
    FinalMetric("env_steps", "env steps", "train", "env_steps", ",.0f"),
    FinalMetric("wall_s", "wall time (s)", "train", "wall_s", ",.1f"),
    FinalMetric("train_sps", "steps per second", "train", "train_sps", ",.0f"),
)


@dataclass
class SeedRun:
    """What one seed's `train` and `evaluate` stages left behind."""

    seed: int
    train: dict[str, float] | None = None
    evaluation: dict[str, float] | None = None
    curve: list[dict[str, float]] | None = None
    provenance: dict[str, Any] | None = None  # None for runs made before it was recorded
    problems: list[str] = field(default_factory=list)  # every problem, missing files included
    missing: list[str] = field(default_factory=list)  # the problems that are missing files

    @property
    def complete(self) -> bool:
        return not self.problems

    def final(self, metric: FinalMetric) -> float | None:
        source = self.train if metric.source == "train" else self.evaluation
        return None if source is None else source.get(metric.field)


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation over the seeds that have the value."""

    mean: float
    std: float  # nan with fewer than two values
    count: int

    @staticmethod
    def of(values: Sequence[float]) -> Stat | None:
        if not values:
            return None
        array = np.asarray(values, dtype=np.float64)
        std = float(array.std(ddof=1)) if array.size > 1 else math.nan
        return Stat(float(array.mean()), std, int(array.size))

    def format(self, spec: str) -> str:
        shown = format(self.mean, spec)
        return shown if math.isnan(self.std) else f"{shown} ± {format(self.std, spec)}"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# The keys each stage has always written (since the first seeded layout) and reports read.
TRAIN_REQUIRED = ("env_steps", "iterations", "wall_s", "train_sps")
EVAL_REQUIRED = ("episodes", "return_mean", "return_std", "return_min", "return_max")


def parse_metrics(text: str, where: str, required: Sequence[str] = ()) -> dict[str, float]:
    """A metrics file: a flat JSON object of numbers with the `required` keys finite
    (ValueError naming the file and the key)."""
    try:
        data = load_json(text)  # a revision's or a DVC remote's file: bounded
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: malformed JSON ({exc})") from None
    except BoundedInputError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a flat JSON object of numbers")
    for key, value in data.items():
        if not _number(value):
            raise ValueError(f"{where}: `{key}` must be a number, got {value!r}")
    for key in required:
        if key not in data:
            raise ValueError(f"{where}: `{key}` is missing (the file is not a complete result)")
        if not math.isfinite(data[key]):
            raise ValueError(f"{where}: `{key}` is {data[key]}, not a finite number")
    return data


def parse_train_metrics(text: str, where: str) -> dict[str, float]:
    return parse_metrics(text, where, TRAIN_REQUIRED)


def parse_eval_metrics(text: str, where: str) -> dict[str, float]:
    return parse_metrics(text, where, EVAL_REQUIRED)


def parse_curve(text: str, where: str) -> list[dict[str, float]]:
    """A learning curve CSV with at least `CURVE_REQUIRED` columns (ValueError otherwise)."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in CURVE_REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{where}: malformed curve (no {', '.join(missing)} column)")
    rows = []
    for line, row in enumerate(reader, start=2):
        try:
            rows.append({k: float(v) for k, v in row.items() if k and v not in ("", None)})
        except ValueError:
            raise ValueError(f"{where}: malformed curve (line {line} is not numbers)") from None
    return rows


def parse_provenance(text: str, where: str) -> dict[str, Any]:
    """Where a run was trained (`rlcore.runtime.provenance`): a JSON object naming the CPU
    and its kernels (ValueError otherwise)."""
    try:
        data = load_json(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: malformed JSON ({exc})") from None
    except BoundedInputError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(key), str) for key in ("cpu", "cpu_kernels")
    ):
        raise ValueError(f"{where}: expected a JSON object with `cpu` and `cpu_kernels`")
    return data


def machine_line(provenance: dict[str, Any]) -> str:
    """`Intel Xeon (torch kernels AVX512, 1 thread), torch 2.13.0, numpy 2.4.6, ...`"""
    threads = provenance.get("torch_threads")
    inside = [f"torch kernels {provenance['cpu_kernels']}"]
    if isinstance(threads, int):
        inside.append(f"{threads} thread{'s' if threads != 1 else ''}")
    if provenance.get("gpu"):
        inside.append(f"GPU {provenance['gpu']}")
    packages = provenance.get("packages")
    releases = [f"{n} {v}" for n, v in packages.items()] if isinstance(packages, dict) else []
    return ", ".join([f"{provenance['cpu']} ({', '.join(inside)})", *releases])


def where_trained(seeds: Sequence[SeedRun]) -> str | None:
    """The machine line the seeds share, else `seed 3: ...; seed 5: ...` for those that
    recorded one; None where none did (runs made before provenance was recorded)."""
    lines = {run.seed: machine_line(run.provenance) for run in seeds if run.provenance}
    if not lines:
        return None
    if len(set(lines.values())) == 1 and len(lines) == len(seeds):
        return next(iter(lines.values()))
    return "; ".join(f"seed {seed}: {line}" for seed, line in lines.items())


def load_seed(read: Reader, layout: Layout, seed: int) -> SeedRun:
    """Read one seed's train metrics, evaluation metrics and curve; collect what is wrong."""
    paths = layout.for_seed(seed)
    run = SeedRun(seed)
    files: list[tuple[str, Path, str, Callable[[str, str], Any]]] = [
        ("train", paths.train_metrics, "train", parse_train_metrics),
        ("evaluation", paths.eval_metrics, "evaluate", parse_eval_metrics),
        ("curve", paths.curve, "train", parse_curve),
    ]
    for attr, path, stage, parse in files:
        where = path.as_posix()
        text = read(where)
        if text is None:
            message = f"{where} is missing: run the `{stage}` stage of seed {seed}"
            run.problems.append(message)
            run.missing.append(message)
            continue
        try:
            setattr(run, attr, parse(text, where))
        except ValueError as exc:
            run.problems.append(str(exc))
    where = paths.provenance.as_posix()
    text = read(where)  # optional: runs made before it was recorded have none
    if text is not None:
        try:
            run.provenance = parse_provenance(text, where)
        except ValueError as exc:
            run.problems.append(str(exc))
    return run


def load_seeds(read: Reader, layout: Layout, seeds: Sequence[int]) -> list[SeedRun]:
    return [load_seed(read, layout, seed) for seed in seeds]


def workspace_reader(root: Path) -> Reader:
    """Read files of a checkout on disk (None where a file does not exist), byte-exact like
    git's copies (no newline translation), so equal files compare equal."""

    def read(path: str) -> str | None:
        try:
            return (root / path).read_bytes().decode("utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    return read


def summarize(seeds: Sequence[SeedRun]) -> dict[str, Stat]:
    """Each final metric's statistics over the complete seeds that report it."""
    complete = [s for s in seeds if s.complete]
    stats = {}
    for metric in FINAL_METRICS:
        values = [v for s in complete if (v := s.final(metric)) is not None]
        stat = Stat.of(values)
        if stat is not None:
            stats[metric.key] = stat
    return stats


def summary_json(seeds: Sequence[SeedRun]) -> dict[str, float]:
    """`metrics/summary.json`: flat numbers, so `dvc exp show` and `dvc metrics diff` list them."""
    out: dict[str, float] = {"seeds": len([s for s in seeds if s.complete])}
    for key, stat in summarize(seeds).items():
        out[f"{key}_mean"] = round(stat.mean, 6)
        if not math.isnan(stat.std):
            out[f"{key}_std"] = round(stat.std, 6)
    return out


# What a figure says of seeds that ended sooner (`band`).
CARRIED = "a seed that stopped early holds its last value"


@dataclass(frozen=True)
class Band:
    """A learning curve over seeds: the mean and the range (min to max) at each x."""

    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int


def band(curves: Sequence[list[dict[str, float]]], x_key: str, y_key: str) -> Band | None:
    """Seeds' curves on the union of their x values, each interpolated within its own range.

    The band starts where every seed has started (with x = wall time, seeds' first points
    differ; a mean of whichever seed came first would be a spike). A seed that ended sooner
    (it reached its stop target, or its run was faster) holds its last value to the end:
    its result stands, and a mean over only the seeds still running would jump where one
    stops while the legend still counts every seed (`CARRIED`).
    """
    points = []
    for rows in curves:
        pairs = sorted(
            (r[x_key], r[y_key])
            for r in rows
            if x_key in r and not math.isnan(r.get(y_key, math.nan))
        )
        if pairs:
            points.append(np.asarray(pairs, dtype=np.float64))
    if not points:
        return None
    start = max(p[0, 0] for p in points)
    x = np.unique(np.concatenate([p[:, 0] for p in points]))
    x = x[x >= start]
    ys = np.full((len(points), x.size), np.nan)
    for i, p in enumerate(points):
        inside = (x >= p[0, 0]) & (x <= p[-1, 0])
        ys[i, inside] = np.interp(x[inside], p[:, 0], p[:, 1])
        ys[i, x > p[-1, 0]] = p[-1, 1]
    return Band(
        x=x,
        mean=np.nanmean(ys, axis=0),
        low=np.nanmin(ys, axis=0),
        high=np.nanmax(ys, axis=0),
        seeds=len(points),
    )
