"""Replay buffer: steady-state allocations of add/sample, peak memory, and their timings.

Run from the repository root:

    .venv/bin/python -m benchmarks.replay_buffer

A buffer of 1M transitions shaped like HalfCheetah's (obs 17, action 6) is filled from a
rollout of N envs x 1 step (what the off-policy loop adds per collector call) and sampled
in batches of 256.
  - Allocations: after warm-up, `add_rollout` and `sample(256)` run under
    `torch.profiler.profile(profile_memory=True)`, which records every allocation of torch's
    CPU allocator; the bytes allocated by those calls are summed. The method is checked
    first: a deliberate `torch.empty` of 1 MB in the same harness must show up.
  - Peak memory: the process's peak RSS (`ru_maxrss`) grows from before the buffer is
    built to after it is filled (wrapped) and sampled; that growth over the buffer's
    nominal bytes (its storage) is the ratio (target <= 1.1).
  - Timings: median microseconds per call over `--reps` runs of 1,000 calls each.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.replay import ReplayBuffer
from rlcore.rollout import DONE, FINAL_OBS, OBS, RolloutSpec, make_rollout

OBS_DIM, ACTION_DIM, CAPACITY, BATCH = 17, 6, 1_000_000, 256


def rollout_of(num_envs: int) -> Any:
    spec = RolloutSpec(
        num_envs, 1, OBS_DIM, (ACTION_DIM,), torch.float32, False, False,
        torch.device("cpu"), with_final_obs=True,
    )  # fmt: skip
    rollout = make_rollout(spec)
    rollout[OBS].normal_()
    rollout[FINAL_OBS].normal_()
    rollout[DONE][::7] = True
    return rollout


def allocated_bytes(fn: Callable[[], object], calls: int = 20) -> int:
    """Bytes torch's CPU allocator hands out during `calls` calls of `fn`."""
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        for _ in range(calls):
            fn()
    return sum(max(e.cpu_memory_usage, 0) for e in prof.events() if e.cpu_memory_usage > 0)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def timed_us(fn: Callable[[], object], reps: int, calls: int = 1_000) -> float:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    meta = setup(args, "replay buffer: allocations, memory, timings")
    probe = allocated_bytes(lambda: torch.empty(64), calls=1)  # 256 bytes of float32
    print(f"method check: a deliberate 256-byte torch.empty shows {probe:,d} allocated bytes")
    if probe < 256:
        raise SystemExit("the profiler does not see allocations here; the figures would lie")

    rollouts = {num_envs: rollout_of(num_envs) for num_envs in (64, 1024)}
    # Peak memory first, with nothing else allocating: build, fill (wrapping) and sample.
    rss_before = peak_rss_bytes()
    buffer = ReplayBuffer(
        CAPACITY, OBS_DIM, (ACTION_DIM,), torch.float32, "cpu", torch.Generator().manual_seed(0)
    )
    while len(buffer) < CAPACITY or buffer.cursor < 1024:
        buffer.add_rollout(rollouts[1024])
    for _ in range(10):
        buffer.sample(BATCH)
    growth = peak_rss_bytes() - rss_before

    rows: list[dict[str, Any]] = []
    for num_envs, rollout in rollouts.items():
        for _ in range(10):  # warm-up: the first calls may allocate (views, caches)
            buffer.add_rollout(rollout)
        rows.append(
            {
                "call": f"add_rollout (N={num_envs})",
                "bytes": allocated_bytes(lambda r=rollout: buffer.add_rollout(r)),
                "us": timed_us(lambda r=rollout: buffer.add_rollout(r), args.reps),
            }
        )
    rows.append(
        {
            "call": f"sample({BATCH})",
            "bytes": allocated_bytes(lambda: buffer.sample(BATCH)),
            "us": timed_us(lambda: buffer.sample(BATCH), args.reps),
        }
    )
    nominal = buffer.nominal_bytes
    print_table(
        rows,
        [
            ("call", "call", ""),
            ("bytes", "bytes allocated / 20 calls", ",d"),
            ("us", "us per call", ".1f"),
        ],
    )
    ratio = growth / nominal
    print(
        f"buffer nominal {nominal / 1e6:.1f} MB; peak RSS growth {growth / 1e6:.1f} MB; "
        f"ratio {ratio:.3f} (target <= 1.1)"
    )
    write_json(args.json, meta, {"rows": rows, "nominal_bytes": nominal, "rss_growth": growth})


if __name__ == "__main__":
    main()
