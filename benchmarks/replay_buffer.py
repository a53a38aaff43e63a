"""Replay buffers: steady-state allocations of add/sample, peak memory, timings, image bytes.

Run from the repository root:

    .venv/bin/python -m benchmarks.replay_buffer

1M-transition buffers shaped like HalfCheetah's (obs 17, action 6): the explicit
`ReplayBuffer` (offline datasets, recordings) takes N = 64 and 1024 transitions per call
through `add` (a TensorDict of N transitions) and `add_rollout` (a rollout of N envs x 1
step); the online `StreamReplayBuffer` (each observation stored once), one per N, takes the
same rollouts through `add_rollout`, each continuing the previous one as the collector's do
(env 0 truncated at every add: a final kept apart per call, one transition in N with one,
far more than time limits give and the most work for `sample`). Each is sampled in batches
of 256.
  - Allocations: after warm-up, 20 calls run under `torch.profiler.profile(profile_memory=
    True)`, and every allocation record of torch's CPU allocator in the profile's event tree
    is summed (positive sizes only). Per-op memory figures (`cpu_memory_usage`) are not
    used: they net allocations against frees inside one op and can hide a temporary. The
    method is checked first: a deliberate 256-byte `torch.empty`, and one freed again
    inside the same profiled scope, must both show up in full; and `add_rollout` of a
    rollout with `mask` (which gathers the valid rows, by design) must show its gathers.
  - Peak memory, per buffer kind (N = 1024): glibc's high-water mark VmHWM is reset
    (`/proc/self/clear_refs`) and the current VmRSS read before the buffer is built; VmHWM
    after filling it completely (wrapped) and sampling, minus that RSS, is the growth; over
    the buffer's nominal bytes it is the ratio (target <= 1.1). Without the reset the
    figure can only be too high.
  - Timings: `benchmarks.common.time_interleaved` (the calls alternate within each of
    `--reps` repetitions of >= 0.1 s each); the median microseconds per call.

Camera images (3 x 84 x 84 uint8 and a float32 [8] vector, action 6, N = 16 envs): bytes per
stored transition of the store-once buffer (nominal bytes / capacity at 100k transitions,
episodes of 1,000 steps; computed on the meta device) against the raw observation, the
explicit uint8 layout and a naive float32 `obs` + `next_obs` one, all with the scalars; and
`add_rollout` / `sample(256)` timings of both buffers at 20k transitions (env 0 truncated at
every add, as above: 1 in 16 sampled transitions has a kept-apart final to copy).

`--frame-stack K` (K > 1) adds the same camera observation seen as K stacked frames
(`env.frame_stack`: image uint8 [3K, 84, 84]): bytes per stored transition of the store-once
buffer, which keeps the newest frame of each row and rebuilds the stacks when sampling,
and of the explicit layout, against the single frame's raw observation; and the store-once
buffer's `add_rollout` / `sample(256)` timings and `sample`'s steady-state allocations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict
from torch._C._profiler import _EventType

from benchmarks.common import base_parser, print_table, setup, time_interleaved, write_json
from benchmarks.update_memory import read_status_kb, reset_hwm
from rlcore.observations import ObsEntry, ObsSpec, as_spec
from rlcore.replay import ReplayBuffer
from rlcore.rollout import DONE, FINAL_OBS, MASK, OBS, TRUNCATED, RolloutSpec, make_rollout
from rlcore.stream_replay import StreamReplayBuffer

OBS_DIM, ACTION_DIM, CAPACITY, BATCH, CALLS = 17, 6, 1_000_000, 256, 20
SIZES = (64, 1024)
EPISODE_STEPS = 1000
IMAGE_SPEC = {"image": ObsEntry((3, 84, 84), torch.uint8), "state": ObsEntry((8,), torch.float32)}
IMAGE_ENVS, IMAGE_CAPACITY, IMAGE_TIMED_CAPACITY = 16, 100_000, 20_000


def rollout_of(num_envs: int, spec: ObsSpec | None = None) -> TensorDict:
    """A filled rollout of `num_envs` envs x 1 step, env 0 truncated, that continues itself:
    its first observation is its last, as the collector's next one would be."""
    spec = spec or as_spec(OBS_DIM)
    rollout = make_rollout(
        RolloutSpec(
            num_envs, 1, spec, (ACTION_DIM,), torch.float32, False, False,
            torch.device("cpu"), with_final_obs=True,
        )
    )  # fmt: skip
    for key in (OBS, FINAL_OBS):
        for value in rollout[key].values():
            value.copy_(torch.randint(0, 256, value.shape).to(value.dtype))
    rollout[OBS][:, 0] = rollout[OBS][:, -1]
    rollout[TRUNCATED][0, 0] = rollout[DONE][0, 0] = True
    return rollout


def stream_buffer(
    capacity: int,
    num_envs: int,
    spec: ObsSpec | None = None,
    device: str = "cpu",
    frame_stack: int = 1,
) -> StreamReplayBuffer:
    return StreamReplayBuffer(
        capacity, spec or as_spec(OBS_DIM), (ACTION_DIM,), torch.float32, device,
        torch.Generator().manual_seed(0), num_envs=num_envs, max_episode_steps=EPISODE_STEPS,
        frame_stack=frame_stack,
    )  # fmt: skip


def stacked_spec(frames: int) -> dict[str, ObsEntry]:
    """`IMAGE_SPEC` with its image seen as `frames` stacked frames."""
    image = IMAGE_SPEC["image"]
    return IMAGE_SPEC | {"image": ObsEntry((3 * frames, *image.shape[1:]), torch.uint8)}


def stacked_rollout(frames: int) -> TensorDict:
    """`rollout_of` the stacked camera observation, each stack one frame repeated (a static
    scene): its first observation is its last, as a collector's would be."""
    rollout = rollout_of(IMAGE_ENVS, stacked_spec(frames))
    for key in (OBS, FINAL_OBS):
        image = rollout[key]["image"].unflatten(2, (frames, 3))
        image.copy_(image[:, :, -1:].expand_as(image).clone())
    return rollout


def explicit_buffer(
    capacity: int, spec: ObsSpec | None = None, device: str = "cpu"
) -> ReplayBuffer:
    return ReplayBuffer(
        capacity, spec or as_spec(OBS_DIM), (ACTION_DIM,), torch.float32, device,
        torch.Generator().manual_seed(0),
    )  # fmt: skip


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
    small = explicit_buffer(4096)
    small.add_rollout(masked)  # warm-up
    return allocated_bytes(lambda: small.add_rollout(masked), calls=1)


def transitions_of(buffer: ReplayBuffer, count: int) -> TensorDict:
    """`count` random transitions with the buffer's keys, for `add`."""
    batch = buffer.empty_batch(count)
    for value in batch.values(include_nested=True, leaves_only=True):
        if value.dtype == torch.bool:
            value.copy_(torch.rand(value.shape) < 0.5)
        else:
            value.normal_()
    return batch


def peak_growth(build: Callable[[], Any], fill: Callable[[Any], None]) -> tuple[Any, int, bool]:
    """The built and filled buffer, its peak RSS growth in bytes, whether VmHWM was reset."""
    hwm_reset = reset_hwm()
    rss_before_kb = read_status_kb("VmRSS")
    buffer = build()
    fill(buffer)
    for _ in range(10):
        buffer.sample(BATCH)
    return buffer, (read_status_kb("VmHWM") - rss_before_kb) * 1024, hwm_reset


def fill_rollouts(buffer: ReplayBuffer | StreamReplayBuffer, rollout: TensorDict) -> None:
    """Add `rollout` until the buffer is full, and twice more: it has wrapped."""
    while len(buffer) < buffer.capacity:
        buffer.add_rollout(rollout)
    for _ in range(2):
        buffer.add_rollout(rollout)


def image_bytes(frame_stack: int = 1) -> list[dict[str, Any]]:
    """Bytes per stored transition of a camera observation, per layout (meta device); with
    `frame_stack` > 1, also of it seen as that many stacked frames."""
    raw = sum(entry.nbytes for entry in IMAGE_SPEC.values())
    scalars = 4 * ACTION_DIM + 4 + 1 + 1  # action, reward, terminated, truncated
    floats = 2 * sum(4 * entry.nbytes // entry.dtype.itemsize for entry in IMAGE_SPEC.values())
    once = stream_buffer(IMAGE_CAPACITY, IMAGE_ENVS, IMAGE_SPEC, device="meta")
    explicit = explicit_buffer(IMAGE_CAPACITY, IMAGE_SPEC, device="meta")
    layouts = [
        ("raw observation + scalars", raw + scalars),
        ("StreamReplayBuffer (store once)", once.nominal_bytes / once.capacity),
        ("ReplayBuffer (uint8 obs + next_obs)", explicit.nominal_bytes / IMAGE_CAPACITY),
        ("naive float32 obs + next_obs", floats + scalars),
    ]
    if frame_stack > 1:
        spec, k = stacked_spec(frame_stack), frame_stack
        once = stream_buffer(IMAGE_CAPACITY, IMAGE_ENVS, spec, device="meta", frame_stack=k)
        explicit = explicit_buffer(IMAGE_CAPACITY, spec, device="meta")
        layouts += [
            (f"StreamReplayBuffer, {k} frames stacked", once.nominal_bytes / once.capacity),
            (f"ReplayBuffer, {k} frames stacked", explicit.nominal_bytes / IMAGE_CAPACITY),
        ]
    return [
        {"layout": name, "bytes": value, "ratio": value / (raw + scalars)}
        for name, value in layouts
    ]


def image_timings(reps: int, frame_stack: int = 1) -> dict[str, float]:
    """Median us per `add_rollout` (N = 16 x 1 step) and `sample(256)`, both layouts (and
    the store-once one of `frame_stack` stacked frames, if above 1)."""
    rollout = rollout_of(IMAGE_ENVS, IMAGE_SPEC)
    calls: dict[str, Callable[[], object]] = {}
    once = stream_buffer(IMAGE_TIMED_CAPACITY, IMAGE_ENVS, IMAGE_SPEC)
    buffers = {
        "StreamReplayBuffer": (once, rollout),
        "ReplayBuffer": (explicit_buffer(IMAGE_TIMED_CAPACITY, IMAGE_SPEC), rollout),
    }
    if frame_stack > 1:
        spec, k = stacked_spec(frame_stack), frame_stack
        stacked = stream_buffer(IMAGE_TIMED_CAPACITY, IMAGE_ENVS, spec, frame_stack=k)
        buffers[f"StreamReplayBuffer ({k} frames)"] = (stacked, stacked_rollout(k))
    for name, (buffer, added) in buffers.items():
        while len(buffer) < buffer.capacity:
            buffer.add_rollout(added)
        calls[f"{name}.add_rollout"] = lambda b=buffer, r=added: b.add_rollout(r)
        calls[f"{name}.sample({BATCH})"] = lambda b=buffer: b.sample(BATCH)
    if frame_stack > 1:
        sample = calls[f"StreamReplayBuffer ({frame_stack} frames).sample({BATCH})"]
        sample()  # warm-up: the first sample of a size allocates its batch
        print(f"stacked sample({BATCH}): {allocated_bytes(sample):,d} B allocated / {CALLS} calls")
    return {name: t.median_s * 1e6 for name, t in time_interleaved(calls, reps).items()}


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--frame-stack", type=int, default=1, help="also camera frames stacked this many deep"
    )
    args = parser.parse_args(argv)
    meta = setup(args, "replay buffer: allocations, memory, timings, image bytes")
    check_method()
    rollouts = {n: rollout_of(n) for n in SIZES}
    control = masked_add_bytes()
    print(f"positive control: add_rollout of a masked rollout (N=64) allocates {control:,d} B")
    if control == 0:
        raise SystemExit("the profiler misses the masked path's gathers; the figures would lie")

    # Peak memory first, with nothing else allocating: build, fill (wrapping) and sample.
    memory: dict[str, dict[str, Any]] = {}
    explicit, growth, hwm = peak_growth(
        lambda: explicit_buffer(CAPACITY), lambda b: fill_rollouts(b, rollouts[1024])
    )
    memory["ReplayBuffer"] = {"nominal": explicit.nominal_bytes, "growth": growth, "hwm": hwm}
    streams = {}
    streams[1024], growth, hwm = peak_growth(
        lambda: stream_buffer(CAPACITY, 1024), lambda b: fill_rollouts(b, rollouts[1024])
    )
    memory["StreamReplayBuffer"] = {"nominal": streams[1024].nominal_bytes, "growth": growth}
    memory["StreamReplayBuffer"]["hwm"] = hwm
    streams[64] = stream_buffer(CAPACITY, 64)
    fill_rollouts(streams[64], rollouts[64])

    batches = {n: transitions_of(explicit, n) for n in SIZES}
    calls: dict[str, Callable[[], object]] = {}
    for n in SIZES:
        calls[f"ReplayBuffer.add (N={n})"] = lambda b=batches[n]: explicit.add(b)
        calls[f"ReplayBuffer.add_rollout (N={n})"] = lambda r=rollouts[n]: explicit.add_rollout(r)
    calls[f"ReplayBuffer.sample({BATCH})"] = lambda: explicit.sample(BATCH)
    for n in SIZES:
        calls[f"StreamReplayBuffer.add_rollout (N={n})"] = lambda n=n: streams[n].add_rollout(
            rollouts[n]
        )
    calls[f"StreamReplayBuffer.sample({BATCH})"] = lambda: streams[1024].sample(BATCH)
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
    for name, figures in memory.items():
        print(
            f"{name}: nominal {figures['nominal'] / 1e6:.1f} MB; peak RSS growth "
            f"{figures['growth'] / 1e6:.1f} MB (VmHWM reset: "
            f"{'yes' if figures['hwm'] else 'no, an upper bound'}); ratio "
            f"{figures['growth'] / figures['nominal']:.3f} (target <= 1.1)"
        )

    layouts = image_bytes(args.frame_stack)
    print(
        f"\ncamera observation {', '.join(f'{k} {e.describe()}' for k, e in IMAGE_SPEC.items())}"
        f", action {ACTION_DIM}; {IMAGE_ENVS} envs, episodes of {EPISODE_STEPS} steps, "
        f"{IMAGE_CAPACITY:,d} transitions"
    )
    print_table(
        layouts,
        [
            ("layout", "layout", ""),
            ("bytes", "bytes / stored transition", ",.1f"),
            ("ratio", "x raw + scalars", ".3f"),
        ],
    )
    image_us = image_timings(args.reps, args.frame_stack)
    print(
        f"\nat {IMAGE_TIMED_CAPACITY:,d} transitions, N = {IMAGE_ENVS} envs x 1 step per add, "
        "env 0 truncated at every add:"
    )
    print_table(
        [{"call": name, "us": us} for name, us in image_us.items()],
        [("call", "call", ""), ("us", "us per call (median)", ".1f")],
    )
    write_json(
        args.json,
        meta,
        {"rows": rows, "memory": memory, "image_layouts": layouts, "image_us": image_us},
    )


if __name__ == "__main__":
    main()
