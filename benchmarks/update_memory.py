"""Peak extra memory of one PPO update against the rollout's nominal size.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.update_memory
    .venv/bin/python -m benchmarks.update_memory --envs cartpole --sizes 1024 --reps 2

For each task preset and N of `--sizes` (T = `--num-steps`), a Trainer is built with the
preset's policy and PPO settings, its collector fills the rollout, one untimed warm-up update
runs (Adam state, first-call allocations), and then each repetition measures the peak memory
growth during `trainer.algo.update(rollout)` relative to just before the call. The figure is
compared with `rlcore.rollout.nominal_bytes(rollout)` (target: ratio <= 1.0).

How memory is measured:

- cuda (`--device cuda`): `torch.cuda.max_memory_allocated()` after
  `reset_peak_memory_stats()`, minus `memory_allocated()` before the update.
- cpu: torch has no CPU allocator statistics and tracemalloc does not see torch's
  allocations, so the process's resident set is used. glibc is first told (mallopt) to
  serve every allocation of 128 KiB or more with its own mmap and to trim freed heap memory
  above 128 KiB, so that freed tensors leave RSS at once and cannot hide a later allocation.
  The peak is VmHWM after resetting it through /proc/self/clear_refs ("5"); where that is
  not permitted, a thread samples VmRSS every 1 ms (which can miss short peaks). A
  calibration allocation of known size is measured first and printed.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import dataclasses
import functools
import gc
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    base_parser,
    device_arg,
    preset_or_note,
    print_table,
    setup,
    write_json,
)
from rlcore.config import ExperimentConfig
from rlcore.envs import ENVS
from rlcore.rollout import nominal_bytes
from rlcore.runtime import keep_freed_memory
from rlcore.trainer import Trainer

MB = 1024**2
TARGET_RATIO = 1.0
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MALLOC_THRESHOLD = 128 * 1024
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def pin_malloc_thresholds() -> bool:
    """Make glibc mmap (and unmap on free) every block >= 128 KiB; False if not glibc.

    Also returns the free heap memory kept by earlier settings to the OS (`malloc_trim`),
    so that no allocation measured afterwards can reuse pages that are already resident.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, _MALLOC_THRESHOLD)
        ok &= libc.mallopt(_M_TRIM_THRESHOLD, _MALLOC_THRESHOLD)
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return bool(ok)


def read_status_kb(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if not permitted."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return read_status_kb("VmHWM") <= read_status_kb("VmRSS") + 64


class RssSampler:
    """Background thread recording the highest VmRSS seen, sampled every `period_s`."""

    def __init__(self, period_s: float = 0.001) -> None:
        self.period_s, self.peak_kb = period_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, read_status_kb("VmRSS"))
            time.sleep(self.period_s)

    def __enter__(self) -> RssSampler:
        self.peak_kb = read_status_kb("VmRSS")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, read_status_kb("VmRSS"))


def peak_extra_bytes(fn: Callable[[], object], device: torch.device, method: str) -> int:
    """Peak memory above the level just before `fn()`, while it runs."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    if method == "hwm":
        if not reset_hwm():
            raise RuntimeError("cannot reset VmHWM through /proc/self/clear_refs")
        before_kb = read_status_kb("VmRSS")
        fn()
        return (read_status_kb("VmHWM") - before_kb) * 1024
    before_kb = read_status_kb("VmRSS")
    with RssSampler() as sampler:
        fn()
    return (sampler.peak_kb - before_kb) * 1024


def calibrate(device: torch.device, method: str, size_mb: int = 64) -> float:
    """Measured MB of a `size_mb` tensor allocated, filled and freed inside the window."""

    def allocate() -> None:
        block = torch.ones(size_mb * MB // 4, device=device)
        del block

    return peak_extra_bytes(allocate, device, method) / MB


def experiment(
    base: ExperimentConfig, n: int, t: int, device: str, microbatch_size: int | str | None
) -> ExperimentConfig:
    return dataclasses.replace(
        base,
        env=dataclasses.replace(base.env, num_envs=n, device=device),
        algo=dataclasses.replace(base.algo, microbatch_size=microbatch_size),
        trainer=dataclasses.replace(
            base.trainer,
            num_steps=t,
            eval_every_iters=0,
            checkpoint_every_iters=0,
            total_env_steps=n * t * 1000,
        ),
    )


def measure(
    task: str,
    base: ExperimentConfig,
    n: int,
    microbatch_size: int | str | None,
    args: argparse.Namespace,
    method: str,
) -> tuple[dict[str, Any], Trainer]:
    """Median peak extra memory of `update`; the trainer is returned for the timing phase."""
    cfg = experiment(base, n, args.num_steps, args.device, microbatch_size)
    trainer = Trainer(cfg)
    rollout, algo = trainer.rollout, trainer.algo
    trainer.collector.collect()
    nominal = nominal_bytes(rollout)
    algo.update(rollout)  # warm-up: optimizer state and first-call allocations
    samples = []
    for _ in range(args.reps):
        trainer.collector.collect()
        update = functools.partial(algo.update, rollout)
        samples.append(peak_extra_bytes(update, trainer.env.device, method))
    extra = statistics.median(samples)
    row = {
        "env": task,
        "N": n,
        "T": args.num_steps,
        "transitions": n * args.num_steps,
        "minibatches": cfg.algo.num_minibatches,
        "microbatch": describe_microbatch(microbatch_size, algo.microbatch_size(rollout)),
        "nominal_mb": nominal / MB,
        "peak_extra_mb": extra / MB,
        "peak_extra_samples_mb": [s / MB for s in samples],
        "ratio": extra / nominal,
    }
    row["verdict"] = "met" if row["ratio"] <= TARGET_RATIO else "MISSED"
    return row, trainer


def time_updates(trainers: list[Trainer], reps: int) -> list[float]:
    """Median seconds of `update` per trainer, alternating between them in every repetition.

    Runs after all memory measurements, under training's allocator settings (freed memory
    kept mapped), which would otherwise hide allocations from the resident-set peak.
    """
    keep_freed_memory()
    seconds: list[list[float]] = [[] for _ in trainers]
    for _ in range(reps):
        for trainer, times in zip(trainers, seconds, strict=True):
            trainer.collector.collect()
            start = time.perf_counter()
            trainer.algo.update(trainer.rollout)
            times.append(time.perf_counter() - start)
    return [statistics.median(times) for times in seconds]


def describe_microbatch(setting: int | str | None, chunk: int | None) -> str:
    """`ppo.microbatch_size` as set, with the chunk it resolved to ("all": no chunking)."""
    resolved = "all" if chunk is None else str(chunk)
    return f"auto ({resolved})" if setting == "auto" else resolved


def parse_microbatch(raw: str) -> int | str | None:
    if raw == "none":
        return None
    return raw if raw == "auto" else int(raw)


COLUMNS: list[tuple[str, str, str]] = [
    ("env", "env", ""),
    ("N", "N", "d"),
    ("T", "T", "d"),
    ("minibatches", "minibatches", "d"),
    ("microbatch", "microbatch", ""),
    ("nominal_mb", "nominal MB", ".2f"),
    ("peak_extra_mb", "peak extra MB", ".2f"),
    ("update_s", "update s", ".3f"),
    ("ratio", "extra/nominal", ".2f"),
    ("verdict", f"<= {TARGET_RATIO}", ""),
]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["cartpole", "push_cube"], choices=ENVS)
    parser.add_argument("--sizes", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--num-steps", type=int, default=32, help="T of the rollout")
    parser.add_argument(
        "--microbatch-sizes",
        nargs="+",
        default=["auto", "none"],
        help="ppo.microbatch_size values to compare ('auto': the default; 'none': whole "
        "minibatch at once)",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument(
        "--method",
        choices=("auto", "hwm", "sample"),
        default="auto",
        help="cpu only: VmHWM reset (hwm), 1 ms RSS sampling (sample), or hwm if possible",
    )
    args = parser.parse_args(argv)
    device = device_arg(args.device)
    meta = setup(
        args,
        "PPO update peak memory vs rollout nominal bytes",
        method=f"median over {args.reps} updates after a warm-up update",
    )
    # Setup keeps freed memory mapped (training's setting, used while timing); memory is
    # measured with every block mapped on demand so that the high-water mark sees each one.
    pinned = pin_malloc_thresholds() if device.type == "cpu" else False
    method = args.method
    if device.type == "cuda":
        how = "torch.cuda.max_memory_allocated - memory_allocated before"
    else:
        if method == "auto":
            method = "hwm" if reset_hwm() else "sample"
        how = {
            "hwm": "VmHWM (reset via /proc/self/clear_refs) - VmRSS before",
            "sample": "max VmRSS sampled every 1 ms - VmRSS before",
        }[method]
        how += f"; glibc mmap/trim thresholds pinned to 128 KiB: {'yes' if pinned else 'NO'}"
    cal = calibrate(device, method)
    print(f"device {device}; peak extra = {how}")
    print(f"calibration: a 64 MB tensor allocated and freed inside the window reads {cal:.2f} MB")
    meta |= {"device": str(device), "method": how, "calibration_64mb_reads_mb": cal}
    rows: list[dict[str, Any]] = []
    groups: list[tuple[list[dict[str, Any]], list[Trainer]]] = []
    for task in args.envs:
        base = preset_or_note(task, f"update memory of {task}")
        if base is None:
            continue
        for n in args.sizes:
            group: tuple[list[dict[str, Any]], list[Trainer]] = ([], [])
            for raw in args.microbatch_sizes:
                print(f"... memory: {task} N={n} microbatch={raw}", flush=True)
                row, trainer = measure(task, base, n, parse_microbatch(raw), args, method)
                group[0].append(row)
                group[1].append(trainer)
            groups.append(group)
    for group_rows, trainers in groups:
        print(f"... update time: {group_rows[0]['env']} N={group_rows[0]['N']}", flush=True)
        for row, seconds in zip(group_rows, time_updates(trainers, args.reps), strict=True):
            row["update_s"] = seconds
        rows += group_rows
    print()
    print_table(rows, COLUMNS)
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
