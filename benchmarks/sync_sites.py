"""Where a training iteration on CUDA waits for the GPU: the source lines that synchronise.

Run from the repository root on a machine with CUDA:

    .venv/bin/python -m benchmarks.sync_sites --tasks cartpole push_cube --num-envs 4096

Issue P19's sync-free hot loop starts from this list. For each task preset (on `--device`,
`--num-envs` envs, evaluation and logging off), one warm-up iteration runs, then `--iters`
iterations (collect + update) under `torch.cuda.set_sync_debug_mode("warn")`. Every
synchronising call (`.item()`, `.tolist()`, a tensor's truth value, a device-to-host copy)
warns; the innermost frame in rlcore/ or pipelines/ that made it is counted. Prints, per
task, each such line with its count per iteration, most frequent first.
"""

from __future__ import annotations

import collections
import dataclasses
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import base_parser, preset_or_note, setup, write_json
from rlcore.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
OURS = (ROOT / "rlcore", ROOT / "pipelines")


def _our_frame() -> str:
    """`path:line (function)` of the innermost frame of our code on the stack."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = Path(frame.filename).resolve()
        if any(path.is_relative_to(root) for root in OURS):
            return f"{path.relative_to(ROOT)}:{frame.lineno} ({frame.name}): {frame.line}"
    return "(outside rlcore and pipelines)"


def sync_sites(
    task: str, device: str, num_envs: int, iters: int, compiled: bool = False
) -> dict[str, Any] | None:
    base = preset_or_note(task, "its sync sites", "ppo")
    if base is None:
        return None
    env = dataclasses.replace(base.env, device=device, num_envs=num_envs)
    # A budget for the warm-up and the iterations, whatever the preset's.
    budget = (iters + 1) * num_envs * base.trainer.num_steps
    trainer_cfg = dataclasses.replace(
        base.trainer, eval_every_iters=0, total_env_steps=budget, stop_at_eval_return=None,
        stop_at_eval_success=None,
    )  # fmt: skip
    # Compiled: `runtime.compile`'s fast path, metrics read at the end of each `run` only.
    trainer = Trainer(
        dataclasses.replace(base, env=env, trainer=trainer_cfg),
        compile_loss=compiled, sync_every=iters + 1 if compiled else 1,
    )  # fmt: skip
    try:
        trainer.run(max_iters=1)  # warm-up: lazy allocations, first-call paths
        sites: collections.Counter[str] = collections.Counter()
        shown = warnings.showwarning

        def record(message, category, filename, lineno, file=None, line=None) -> None:
            if "synchroniz" in str(message):
                sites[_our_frame()] += 1
            else:
                shown(message, category, filename, lineno, file, line)

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            torch.cuda.set_sync_debug_mode("warn")
            try:
                trainer.run(max_iters=iters)
                torch.cuda.synchronize()
            finally:
                torch.cuda.set_sync_debug_mode("default")
                warnings.showwarning = shown
    finally:
        trainer.env.close()
    return {
        "task": task,
        "compiled": compiled,
        "num_envs": num_envs,
        "iters": iters,
        "syncs_per_iter": sum(sites.values()) / iters,
        "sites": {site: count / iters for site, count in sites.most_common()},
    }


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tasks", nargs="+", default=["cartpole", "push_cube"])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument(
        "--compile", action="store_true",
        help="runtime.compile's path (whole-step PPO, metrics read once per run)",
    )  # fmt: skip
    args = parser.parse_args()
    if not torch.cuda.is_available() or not args.device.startswith("cuda"):
        raise SystemExit("sync_sites needs a CUDA device (--device cuda): CPU never syncs")
    meta = setup(args, "Host syncs per training iteration on CUDA, by source line")
    results = []
    for task in args.tasks:
        found = sync_sites(task, args.device, args.num_envs, args.iters, args.compile)
        if found is None:
            continue
        results.append(found)
        print(f"\n{task}, N={args.num_envs}: {found['syncs_per_iter']:.1f} syncs per iteration")
        for site, count in found["sites"].items():
            print(f"  {count:8.1f}  {site}")
    write_json(args.json, meta, {"results": results})


if __name__ == "__main__":
    main()
