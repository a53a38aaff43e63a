"""Shared plumbing of the benchmark scripts: CLI flags, header, timing, tables, JSON."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import yaml

from rlcore.config import ExperimentConfig
from rlcore.presets import PRESETS_BY_ALGORITHM
from rlcore.runtime import RESULT_PACKAGES, configure_cpu, provenance


def scratch_env(**extra: str) -> dict[str, str]:
    """Environment for benchmarks that run git, DVC and this interpreter in a throwaway repo:
    this venv first on PATH, no analytics, a fixed committer."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
        **extra,
    }


def merged(base: dict, changes: dict, whole: tuple[str, ...] = ()) -> dict:
    """`base` with `changes` applied key by key (DVC needs every section it tracks present);
    a key in `whole` (a search space, say) is replaced as a whole."""
    out = dict(base)
    for key, value in changes.items():
        nested = isinstance(value, dict) and value and key not in whole
        out[key] = merged(base.get(key) or {}, value, whole) if nested else value
    return out


def scratch_project(
    root: Path, env: dict[str, str], params: dict[str, Any], source: Path | None = None
) -> None:
    """A committed git + DVC project in `root`: the code (`pipelines`, `rlcore`) and
    pipelines (`dvc.yaml`, `search/dvc.yaml`) of `source` (this checkout), with `params`
    as its params.yaml. Stages then run the copied code, never this checkout's."""
    source = source or Path(__file__).resolve().parents[1]
    for item in ("pipelines", "rlcore"):
        shutil.copytree(source / item, root / item, ignore=shutil.ignore_patterns("__pycache__"))
    for dvcfile in ("dvc.yaml", "search/dvc.yaml"):
        (root / dvcfile).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / dvcfile, root / dvcfile)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    for args in (
        ["git", "init", "-q"],
        [sys.executable, "-m", "dvc", "init", "-q"],
        [sys.executable, "-m", "dvc", "config", "core.analytics", "false"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "scratch project"],
    ):
        done = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed in {root}:\n{done.stderr}")


def run_timed(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Run a command, fail loudly with its output, and return its wall seconds."""
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - start


def hidden_sizes(text: str) -> tuple[int, ...]:
    """`256` (two layers of 256) or `400x300`: the hidden layers of actor and critics."""
    try:
        sizes = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"expected sizes like 256 or 400x300, got {text!r}")
    return sizes * 2 if len(sizes) == 1 else sizes


def base_parser(description: str) -> argparse.ArgumentParser:
    """Parser with the flags every benchmark takes: --threads, --reps, --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument(
        "--reps", type=int, default=5, help="timed repetitions; the median is reported"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser


# The run's packages, and the baseline's: its release changes its numbers too.
BENCHMARK_PACKAGES = (*RESULT_PACKAGES, "stable_baselines3")


def device_arg(name: str) -> torch.device:
    """`--device NAME` as a torch device; one line and exit where it names none, or CUDA on
    a machine without it (not a traceback from deep in the first CUDA call)."""
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise SystemExit(f"--device: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: CUDA is not available on this machine")
    return device


def setup(
    args: argparse.Namespace,
    title: str,
    method: str | None = None,
) -> dict[str, Any]:
    """Apply --threads, print the header and return the run's metadata (for the JSON)."""
    if args.threads <= 0:
        raise SystemExit(f"--threads must be a positive integer, got {args.threads}")
    if args.reps <= 0:
        raise SystemExit(f"--reps must be a positive integer, got {args.reps}")
    # Same process settings as training runs: pinned threads, freed memory kept mapped.
    configure_cpu(args.threads)
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 0
    meta: dict[str, Any] = {
        "benchmark": title,
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        **provenance(packages=BENCHMARK_PACKAGES),
        "argv": sys.argv[1:],
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    print(f"== {title} ==")
    print(
        f"torch {meta['torch']} | torch threads {meta['torch_threads']} (--threads) | "
        f"CPUs {meta['cpu_count']} ({usable} usable) | python {meta['python']}"
    )
    print(
        f"CPU {meta['cpu']} | torch kernels {meta['cpu_kernels']} | "
        + " ".join(
            f"{name} {release}" for name, release in meta["packages"].items() if name != "torch"
        )
    )
    print(method or f"medians of {args.reps} timed repetitions after warm-up")
    return meta


@dataclass(frozen=True)
class Timing:
    """Median seconds per call of a timed function, and how it was measured."""

    median_s: float
    samples_s: list[float]
    calls_per_rep: int


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def matmul_ms_per_call(fn: Callable[[], object], calls: int = 20) -> float:
    """Milliseconds per call of `fn` spent inside matrix-product kernels (the profiler's
    self CPU time of `MATMUL_OPS`). Eager and compiled code call the same BLAS kernels, so
    compiling can shorten a step to these at best, however the rest is fused."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    total_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in MATMUL_OPS)
    return total_us / calls / 1e3


def time_calls(fn: Callable[[], object], reps: int, min_rep_s: float = 0.1) -> Timing:
    """Warm up `fn`, then time `reps` repetitions; return the median seconds per call.

    Each repetition runs `fn` enough times to last about `min_rep_s` (calibrated on the
    warm-up), so fast calls are not dominated by timer noise; slow calls run once per rep
    (`min_rep_s=0`: one warm-up call, one call per repetition).
    """
    return time_interleaved({"fn": fn}, reps, min_rep_s)["fn"]


def time_interleaved(
    fns: dict[str, Callable[[], object]], reps: int, min_rep_s: float = 0.1
) -> dict[str, Timing]:
    """Like `time_calls` for several functions, alternating them within every repetition.

    Figures that are compared with each other (ratios) then see the same background load,
    which matters on a shared machine. Every other repetition runs them in reverse order, so
    no function always runs first (after the previous repetition's last) or last.
    """
    calls: dict[str, int] = {}
    for name, fn in fns.items():
        fn()  # warm-up
        calls[name] = 1
        if min_rep_s > 0:  # a second, timed warm-up call sets the calls per repetition
            start = time.perf_counter()
            fn()
            once = time.perf_counter() - start
            calls[name] = max(1, math.ceil(min_rep_s / max(once, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for rep in range(reps):
        for name, fn in order if rep % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / calls[name])
    return {
        name: Timing(statistics.median(samples[name]), samples[name], calls[name]) for name in fns
    }


def paired_ratios(baseline: Timing, candidate: Timing) -> list[float]:
    """candidate speed / baseline speed within each repetition of `time_interleaved` (the
    two ran back to back there, under the same load): baseline time / candidate time."""
    return [b / c for b, c in zip(baseline.samples_s, candidate.samples_s, strict=True)]


def preset_or_note(task: str, what: str, algorithm: str = "ppo") -> ExperimentConfig | None:
    """The task's tuned preset, or None after printing that `what` is skipped without one."""
    cfg = PRESETS_BY_ALGORITHM[algorithm].get(task)
    if cfg is None:
        print(f"note: no {algorithm} preset for {task!r} in rlcore.presets; skipping {what}")
    return cfg


def format_value(value: object, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format(value, spec) if spec else str(value)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> None:
    """Print rows as a plain-text table; `columns` are (key, header, format spec)."""
    cells = [[header for _, header, _ in columns]]
    cells += [[format_value(row.get(key), spec) for key, _, spec in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for i, line in enumerate(cells):
        text = "  ".join(
            cell.ljust(w) if j == 0 else cell.rjust(w)
            for j, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        print(text.rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def write_json(path: Path | None, meta: dict[str, Any], results: dict[str, Any]) -> None:
    """Write `{"meta": ..., **results}` to `path` (if given), NaN as null."""
    if path is None:
        return

    def clean(obj: Any) -> Any:
        if isinstance(obj, float) and not math.isfinite(obj):
            return None
        if isinstance(obj, dict):
            return {str(k): clean(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [clean(v) for v in obj]
        return obj

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean({"meta": meta, **results}), indent=2) + "\n")
    print(f"wrote {path}")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std over seeds (std 0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def verdict(value: float | None, target: float, higher_is_better: bool) -> str:
    """'met' / 'MISSED' for a figure against its target ('-' when not measured)."""
    if value is None or math.isnan(value):
        return "-"
    ok = value >= target if higher_is_better else value <= target
    return "met" if ok else "MISSED"
