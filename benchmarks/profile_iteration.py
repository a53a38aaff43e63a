"""Where one training iteration's time goes: torch.profiler over whole iterations.

Run from the repository root:

    .venv/bin/python -m benchmarks.profile_iteration --device cuda --num-envs 65536 --compile
    .venv/bin/python -m benchmarks.profile_iteration --task push_cube --num-envs 4096

Builds the task preset with `--num-envs` envs on `--device` (evaluation off), runs
`--warmup` iterations (compiling and capturing, with `--compile`), then profiles `--iters`
more and prints the operators that took the most device time (self time, summed over the
iterations, per iteration), and the iteration's wall time. On CPU the device time is
the CPU time. What it is for: deciding which part of the hot loop to make faster next
(issue P19), with figures rather than guesses.
"""

from __future__ import annotations

import dataclasses
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import base_parser, preset_or_note, setup, write_json
from rlcore.trainer import Trainer


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--task", default="cartpole")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--compile", action="store_true", help="runtime.compile's path")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    meta = setup(args, "Profile of training iterations")
    base = preset_or_note(args.task, "a profile", "ppo")
    if base is None:
        return
    budget = (args.warmup + args.iters + 1) * args.num_envs * base.trainer.num_steps
    cfg = dataclasses.replace(
        base,
        env=dataclasses.replace(base.env, device=args.device, num_envs=args.num_envs),
        trainer=dataclasses.replace(
            base.trainer, eval_every_iters=0, total_env_steps=budget, stop_at_eval_return=None,
            stop_at_eval_success=None,
        ),
    )  # fmt: skip
    cuda = torch.device(args.device).type == "cuda"
    trainer = Trainer(cfg, compile_loss=args.compile, sync_every=args.iters + 1)

    def iterations(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            trainer._train_iteration()
        trainer.flush()
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / count

    iterations(args.warmup)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    wall = iterations(args.iters)  # timed without the profiler's overhead
    with profile(activities=activities) as prof:
        iterations(args.iters)
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(
        f"\n{args.task}, N={args.num_envs}, T={cfg.trainer.num_steps}, "
        f"{'compiled' if args.compile else 'eager'}: {wall * 1e3:.1f} ms per iteration "
        f"({cfg.steps_per_iter / wall / 1e6:.2f}M env steps/s, unprofiled)"
    )
    print(prof.key_averages().table(sort_by=sort, row_limit=args.top, max_name_column_width=60))
    rows = []
    for event in prof.key_averages():
        device_us = event.self_device_time_total if cuda else event.self_cpu_time_total
        rows.append(
            {"name": event.key, "calls": event.count, "self_us_per_iter": device_us / args.iters}
        )
    rows.sort(key=lambda row: -row["self_us_per_iter"])
    write_json(
        args.json,
        meta,
        {"wall_s_per_iter": wall, "steps_per_iter": cfg.steps_per_iter, "ops": rows[:200]},
    )
    trainer.env.close()


if __name__ == "__main__":
    main()
