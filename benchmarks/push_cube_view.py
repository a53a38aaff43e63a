"""PushCube's top-down camera: milliseconds per `TopDownView.draw` of N instances.

Run from the repository root:

    .venv/bin/python -m benchmarks.push_cube_view
    .venv/bin/python -m benchmarks.push_cube_view --envs 64 256 --sizes 48 64 84 --reps 9
    .venv/bin/python -m benchmarks.push_cube_view --device cuda

For each N (`--envs`) and image size (`--sizes`), the states of a freshly reset PushCube are
drawn into the slice `buf[t]` of a time-major `[T, N, 3, size, size]` uint8 buffer, as a
camera rollout would, cycling over T = 8 slices. Reports the median ms per draw, per
instance, and the floor set by the output alone: one copy of an image batch of that size
into the same slice (every draw must write all of its bytes). On CUDA each timed call ends
with a synchronize, so the figure is a draw's latency, launches included.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from benchmarks.common import (
    base_parser,
    device_arg,
    print_table,
    setup,
    time_interleaved,
    write_json,
)
from rlcore.envs.push_cube import PushCube
from rlcore.envs.push_cube_view import TopDownView

STEPS = 8


def measure(num_envs: int, size: int, device: torch.device, reps: int) -> dict[str, Any]:
    env = PushCube(num_envs, device=device)
    env.reset(seed=0)
    state = env.state_dict()["physics.state"]
    view = TopDownView(num_envs, size, device)
    buf = torch.zeros(STEPS, num_envs, 3, size, size, dtype=torch.uint8, device=device)
    image = torch.zeros_like(buf[0])
    slots = itertools.cycle(range(STEPS))

    def finish() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def draw() -> None:
        view.draw(state, buf[next(slots)])
        finish()

    def copy() -> None:
        buf[next(slots)].copy_(image)
        finish()

    timings = time_interleaved({"draw": draw, "copy": copy}, reps)
    draw_ms, copy_ms = timings["draw"].median_s * 1e3, timings["copy"].median_s * 1e3
    return {
        "envs": num_envs,
        "size": size,
        "window": view.window,
        "draw_ms": draw_ms,
        "us_per_env": draw_ms * 1e3 / num_envs,
        "copy_ms": copy_ms,
        "mb": buf[0].numel() / 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 256], help="N per draw")
    parser.add_argument("--sizes", type=int, nargs="+", default=[48, 64, 84], help="image side")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    args = parser.parse_args(argv)
    meta = setup(args, "PushCube top-down view: ms per draw")
    device = device_arg(args.device)
    print(f"device {device} | torch.set_num_threads({torch.get_num_threads()})")
    rows = [measure(n, size, device, args.reps) for n in args.envs for size in args.sizes]
    print_table(
        rows,
        [
            ("envs", "N", "d"),
            ("size", "size", "d"),
            ("window", "window px", "d"),
            ("draw_ms", "ms/draw", ".3f"),
            ("us_per_env", "us/env", ".2f"),
            ("copy_ms", "copy floor ms", ".3f"),
            ("mb", "MB out", ".2f"),
        ],
    )
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
