"""Iterations, env steps and wall time to target of the GPU presets and the settings they beat.

    .venv/bin/python -m benchmarks.cuda_presets --seeds 0 1              # CUDA if present
    .venv/bin/python -m benchmarks.cuda_presets --device cpu --variants  # the comparison
    .venv/bin/python -m benchmarks.cuda_presets --device cuda --compile --tasks cuda_push_cube

Each run trains one preset of `rlcore.presets_cuda` (or, with `--variants`, each alternative
it was chosen over) to its stop target and reports the iterations it took, its env steps,
its wall time with and without evaluation, and the last evaluation. On a GPU an iteration
costs about the same at any N, so iterations are what the choice minimises. Settings take
about as many iterations on a CPU as on a GPU (the same algorithm; only the random streams
differ), which is why a CPU can compare them.
`--compile` trains with `runtime.compile`'s path (the first run pays for compiling; later
ones read torch's on-disk cache: the table gives every run).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from typing import Any

import torch

from benchmarks.common import base_parser, device_arg, print_table, setup, write_json
from rlcore.config import ExperimentConfig
from rlcore.presets_cuda import CUDA_PRESETS
from rlcore.trainer import Trainer


def _algo(cfg: ExperimentConfig, **changes: Any) -> ExperimentConfig:
    return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, **changes))


def _steps(cfg: ExperimentConfig, num_steps: int) -> ExperimentConfig:
    return dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, num_steps=num_steps))


# What each preset was chosen over, at the same N (changes from the preset).
VARIANTS: dict[str, dict[str, Any]] = {
    "cuda_cartpole": {
        "lr 1e-3 constant, 5 x 4": lambda c: _algo(
            c, lr_schedule="constant", num_epochs=5, num_minibatches=4
        ),
        "lr 1e-3 kl_adaptive, 5 x 4": lambda c: _algo(c, num_epochs=5, num_minibatches=4),
        "lr 1e-3 constant, 8 x 8": lambda c: _algo(c, lr_schedule="constant"),
        "lr 2e-3 constant, 10 x 8": lambda c: _algo(
            c, lr=2e-3, lr_schedule="constant", num_epochs=10
        ),
    },
    "cuda_push_cube": {
        "lr 1e-3, 10 x 8 (PushCube's rate)": lambda c: _algo(c, lr=1e-3),
        "lr 2e-3, 5 x 4": lambda c: _algo(c, num_epochs=5, num_minibatches=4),
        "lr 2e-3, 10 x 8, T = 8": lambda c: _steps(c, 8),
    },
}


def default_tasks(device: str) -> list[str]:
    """The presets a run takes unless told: the builtin tasks anywhere, `cuda_halfcheetah`
    only on CUDA with `mujoco_warp` installed (on a CPU its 4,096 MuJoCo envs take hours)."""
    warp = device.startswith("cuda") and importlib.util.find_spec("mujoco_warp") is not None
    return [task for task in sorted(CUDA_PRESETS) if warp or task != "cuda_halfcheetah"]


def run(task: str, variant: str, cfg: ExperimentConfig, seed: int, compiled: bool) -> dict:
    """Train `cfg` with `seed` to its stop target (or budget)."""
    cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, seed=seed))
    evals: list[dict[str, float]] = []
    eval_s = [0.0]
    curve: list[tuple[float, int, float, float]] = []

    def sink(step: int, metrics: dict[str, float]) -> None:
        if "time/eval_s" in metrics:
            eval_s[0] += metrics["time/eval_s"]
            evals.append(metrics)
            curve.append(
                (
                    time.perf_counter() - start - eval_s[0],
                    step,
                    metrics.get("eval/episode_return", float("nan")),
                    metrics.get("eval/success_rate", float("nan")),
                )
            )

    start = time.perf_counter()
    trainer = Trainer(cfg, sink=sink, compile_loss=compiled)
    result = trainer.run()
    wall = time.perf_counter() - start
    last = evals[-1] if evals else {}
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "reached": result.reached_target,
        "iterations": result.iterations,
        "env_steps": result.env_steps,
        "wall_s": wall,
        "wall_ex_eval_s": wall - eval_s[0],
        "return": last.get("eval/episode_return", float("nan")),
        "success": last.get("eval/success_rate", float("nan")),
        "curve": curve,  # (wall s without evaluation, env steps, return, success) per evaluation
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks", nargs="+", choices=CUDA_PRESETS, help="default: those the device runs"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument(
        "--device", default=None, help="cuda or cpu (default: cuda where torch sees one)"
    )
    parser.add_argument("--variants", action="store_true", help="also the settings beaten")
    parser.add_argument("--compile", action="store_true", help="runtime.compile's path")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device_arg(device)
    meta = setup(
        args,
        f"GPU presets to target on {device}",
        "each run once: wall time from building the trainer to its stop target (with "
        "--compile, a process's first run includes compiling)",
    )
    if device.startswith("cuda"):
        meta["gpu"] = torch.cuda.get_device_name(torch.device(device))
        print(f"GPU {meta['gpu']}")
    rows = []
    for task in args.tasks or default_tasks(device):
        preset = CUDA_PRESETS[task]
        preset = dataclasses.replace(preset, env=dataclasses.replace(preset.env, device=device))
        variants = {"preset": preset}
        if args.variants:
            variants |= {name: make(preset) for name, make in VARIANTS.get(task, {}).items()}
        for name, cfg in variants.items():
            for seed in args.seeds:
                row = run(task, name, cfg, seed, args.compile)
                print(
                    f"{task} [{name}] seed {seed}: {row['iterations']} iterations, "
                    f"{row['env_steps']:,d} env steps, {row['wall_s']:.1f} s",
                    flush=True,
                )
                rows.append(row)
    print()
    print_table(
        rows,
        [
            ("task", "task", ""),
            ("variant", "settings", ""),
            ("seed", "seed", "d"),
            ("reached", "reached", ""),
            ("iterations", "iterations", "d"),
            ("env_steps", "env steps", ",d"),
            ("wall_s", "wall s", ".1f"),
            ("wall_ex_eval_s", "wall s without eval", ".1f"),
            ("return", "last eval return", ".1f"),
            ("success", "success", ".2f"),
        ],
    )
    write_json(args.json, meta, {"device": device, "rows": rows})


if __name__ == "__main__":
    main()
