"""Replay buffer: steady-state allocations of add/sample, peak memory, and their timings.

Run from the repository root:

    .venv/bin/python -m benchmarks.replay_buffer

A buffer of 1M transitions shaped like HalfCheetah's (obs 17, action 6) takes N = 64 and
1024 transitions per call, through `add` (a TensorDict of N transitions) and `add_rollout`
(a rollout of N envs x 1 step, what the off-policy loop adds per collector call), and is
sampled in batches of 256.
  - Allocations: after warm-up, 20 calls run under `torch.profiler.profile(profile_memory=
    True)`, and every allocation record of torch's CPU allocator in the profile's event tree
    is summed (positive sizes only). Per-op memory figures (`cpu_memory_usage`) are not
    used: they net allocations against frees inside one op and can hide a temporary. The
    method is checked first: a deliberate 256-byte `torch.empty`, and one freed again
    inside the same profiled scope, must both show up in full; and `add_rollout` of a
    rollout with `mask` (which gathers the valid rows, by design) must show its gathers.
  - Peak memory: glibc's high-water mark VmHWM is reset (`/proc/self/clear_refs`) and the
    current VmRSS read before the buffer is built; VmHWM after filling it completely
    (wrapped) and sampling, minus that RSS, is the growth; over the buffer's nominal bytes
    it is the ratio (target <= 1.1). Without the reset the figure can only be too high.
  - Timings: `benchmarks.common.time_interleaved` (the calls alternate within each of
    `--reps` repetitions of >= 0.1 s each); the median microseconds per call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict
from torch._C._profiler import _EventType

from benchmarks.common import base_parser, print_table, setup, time_interleaved, write_json
from benchmarks.update_memory import read_status_kb, reset_hwm
from rlcore.observations import FLAT_KEY, as_spec
from rlcore.replay import ReplayBuffer
from rlcore.rollout import DONE, FINAL_OBS, MASK, OBS, RolloutSpec, make_rollout

OBS_DIM, ACTION_DIM, CAPACITY, BATCH, CALLS = 17, 6, 1_000_000, 256, 20
SIZES = (64, 1024)


def rollout_of(num_envs: int) -> TensorDict:
    """A filled rollout of `num_envs` envs x 1 step, one env in seven done."""
    spec = RolloutSpec(
        num_envs, 1, as_spec(OBS_DIM), (ACTION_DIM,), torch.float32, False, False,
        torch.device("cpu"), with_final_obs=True,
    )  # fmt: skip
    rollout = make_rollout(spec)
    rollout[OBS, FLAT_KEY].normal_()
    rollout[FINAL_OBS, FLAT_KEY].normal_()
    rollout[DONE][::7] = True
    return rollout


def allocated_bytes(fn: Callable[[], object], calls: int = CALLS) -> int:
    """Bytes torch's CPU allocator hands out during `calls` calls of `fn`, every record."""
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        for _ in range(calls):
            fn()
    total, stack = 0, list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation:
            total += max(event.extra_fields.alloc_size, 0)
    return total


def check_method() -> None:
    """Refuse to report if the counter misses a deliberate allocation."""

    def temporary() -> None:
        with torch.profiler.record_function("scope"):
            block = torch.empty(256)
            del block  # freed inside the scope: a per-op net figure would show 0

    plain = allocated_bytes(lambda: torch.empty(64), calls=1)
    inner = allocated_bytes(temporary, calls=1)
    print(f"method check: torch.empty of 256 B -> {plain} B; 1024 B freed in-scope -> {inner} B")
    if plain != 256 or inner != 1024:
        raise SystemExit("the profiler does not see every allocation here; the figures would lie")


def masked_add_bytes() -> int:
    """Bytes one `add_rollout` of a masked rollout allocates (it gathers the valid rows)."""
    masked = rollout_of(64)
    masked.set(MASK, torch.ones(masked.batch_size, dtype=torch.bool))
    small = ReplayBuffer(4096, OBS_DIM, (ACTION_DIM,), torch.float32, "cpu", torch.Generator())
    small.add_rollout(masked)  # warm-up
    return allocated_bytes(lambda: small.add_rollout(masked), calls=1)


def transitions_of(buffer: ReplayBuffer, count: int) -> TensorDict:
    """`count` random transitions with the buffer's keys, for `add`."""
    batch = buffer.empty_batch(count)
    for value in batch.values():
        if value.dtype == torch.bool:
            value.copy_(torch.rand(value.shape) < 0.5)
        else:
            value.normal_()
    return batch


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    meta = setup(args, "replay buffer: allocations, memory, timings")
    check_method()
    rollouts = {n: rollout_of(n) for n in SIZES}
    control = masked_add_bytes()
    print(f"positive control: add_rollout of a masked rollout (N=64) allocates {control:,d} B")
    if control == 0:
        raise SystemExit("the profiler misses the masked path's gathers; the figures would lie")

    # Peak memory first, with nothing else allocating: build, fill (wrapping) and sample.
    hwm_reset = reset_hwm()
    rss_before_kb = read_status_kb("VmRSS")
    buffer = ReplayBuffer(
        CAPACITY, OBS_DIM, (ACTION_DIM,), torch.float32, "cpu", torch.Generator().manual_seed(0)
    )
    while len(buffer) < CAPACITY or buffer.cursor < 1024:
        buffer.add_rollout(rollouts[1024])
    for _ in range(10):
        buffer.sample(BATCH)
    growth = (read_status_kb("VmHWM") - rss_before_kb) * 1024
    nominal = buffer.nominal_bytes

    batches = {n: transitions_of(buffer, n) for n in SIZES}
    calls: dict[str, Callable[[], object]] = {}
    for n in SIZES:
        calls[f"add (N={n})"] = lambda b=batches[n]: buffer.add(b)
        calls[f"add_rollout (N={n})"] = lambda r=rollouts[n]: buffer.add_rollout(r)
    calls[f"sample({BATCH})"] = lambda: buffer.sample(BATCH)
    for fn in calls.values():
        for _ in range(10):  # warm-up: the first sample of a size allocates its batch
            fn()
    allocated = {name: allocated_bytes(fn) for name, fn in calls.items()}
    timings = time_interleaved(calls, args.reps)
    rows: list[dict[str, Any]] = [
        {"call": name, "bytes": allocated[name], "us": timings[name].median_s * 1e6}
        for name in calls
    ]
    print_table(
        rows,
        [
            ("call", "call", ""),
            ("bytes", f"bytes allocated / {CALLS} calls", ",d"),
            ("us", "us per call (median)", ".1f"),
        ],
    )
    ratio = growth / nominal
    print(
        f"buffer nominal {nominal / 1e6:.1f} MB; peak RSS growth {growth / 1e6:.1f} MB "
        f"(VmHWM reset: {'yes' if hwm_reset else 'no, an upper bound'}); "
        f"ratio {ratio:.3f} (target <= 1.1)"
    )
    write_json(
        args.json,
        meta,
        {"rows": rows, "nominal_bytes": nominal, "rss_growth": growth, "hwm_reset": hwm_reset},
    )


if __name__ == "__main__":
    main()
