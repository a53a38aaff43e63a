"""SAC from the camera, with and without DrQ's random-shift augmentation, side by side.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.sac_pixels
    .venv/bin/python -m benchmarks.sac_pixels --variants shift --seeds 0 --steps 20000

Every (variant, seed) is one `Trainer.run()` of `SAC_PRESETS["push_cube_pixels"]` (the
critics read the image and the pusher's own state through one spatial-keypoint encoder they
train; the actor reads its features, detached) made small enough for a 2-core CPU:
`--image-size` (32) pixels, batches of 128 and a gradient step every second env step. The
variants differ only in `algorithm.sac.random_shift`:

- `shift`: every sampled image (and next image) shifted by up to `--pad` (2) pixels;
- `no-shift`: the images as stored.

Evaluation (64 episodes, deterministic actions) every `--eval-every` env steps. Reported:
per variant and seed the evaluation return and success at each of those steps; then the
mean over seeds at each step, and the mean over all evaluation points (the area under the
curve: "better at equal env steps" over the whole run, not at one lucky point).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.config import ExperimentConfig
from rlcore.presets import SAC_PRESETS
from rlcore.trainer import Trainer

BASE = SAC_PRESETS["push_cube_pixels"]
VARIANTS = ("shift", "no-shift")


def variant_config(
    variant: str, seed: int, steps: int, image_size: int, pad: int, eval_every: int
) -> ExperimentConfig:
    env_steps_per_iter = BASE.env.num_envs * BASE.trainer.num_steps
    trainer = dataclasses.replace(
        BASE.trainer,
        seed=seed,
        total_env_steps=steps,
        eval_every_iters=max(1, eval_every // env_steps_per_iter),
        checkpoint_every_iters=0,
        stop_at_eval_success=None,  # equal env steps for every run
    )
    return dataclasses.replace(
        BASE,
        env=dataclasses.replace(BASE.env, options={**BASE.env.options, "image_size": image_size}),
        algo=dataclasses.replace(BASE.algo, random_shift=pad if variant == "shift" else 0),
        replay=dataclasses.replace(BASE.replay, batch_size=128, updates_per_step=0.5),
        trainer=trainer,
    )


def run(cfg: ExperimentConfig) -> tuple[list[dict[str, float]], float]:
    """The run's evaluations (env steps, return, success) and its wall time, evaluation excluded."""
    trainer = Trainer(cfg)
    evals: list[dict[str, float]] = []
    eval_s = 0.0

    def sink(env_steps: int, metrics: dict[str, float]) -> None:
        nonlocal eval_s
        if "eval/episode_return" in metrics:
            eval_s += metrics.get("time/eval_s", 0.0)
            evals.append({
                "env_steps": env_steps,
                "return": metrics["eval/episode_return"],
                "success": metrics["eval/success_rate"],
            })  # fmt: skip
            print(f"    {env_steps:>7,} env steps: return {evals[-1]['return']:.1f}, "
                  f"success {evals[-1]['success']:.2f}", flush=True)  # fmt: skip

    trainer.sink = sink
    start = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - start - eval_s
    trainer.env.close()
    return evals, wall


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--pad", type=int, default=2, help="the shift variant's random_shift")
    parser.add_argument("--eval-every", type=int, default=5_120, help="env steps")
    args = parser.parse_args(argv)
    meta = setup(args, "sac_pixels", method="one run per variant and seed, equal env steps")
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:  # seeds outermost: an interrupted run still pairs the variants
        for variant in args.variants:
            print(f"... {variant} seed {seed}", flush=True)
            cfg = variant_config(
                variant, seed, args.steps, args.image_size, args.pad, args.eval_every
            )
            evals, wall = run(cfg)
            runs.append({"variant": variant, "seed": seed, "evals": evals, "wall_s": wall})
    rows = []
    for variant in args.variants:
        mine = [r for r in runs if r["variant"] == variant]
        points = len(mine[0]["evals"])
        for i in range(points):
            returns = [r["evals"][i]["return"] for r in mine]
            rows.append({
                "variant": variant,
                "env_steps": mine[0]["evals"][i]["env_steps"],
                "return": statistics.mean(returns),
                "return_std": statistics.pstdev(returns),
                "success": statistics.mean(r["evals"][i]["success"] for r in mine),
            })  # fmt: skip
        rows.append({
            "variant": variant, "env_steps": None, "point": "mean of all",
            "return": statistics.mean(e["return"] for r in mine for e in r["evals"]),
            "success": statistics.mean(e["success"] for r in mine for e in r["evals"]),
            "wall_s": statistics.median(r["wall_s"] for r in mine),
        })  # fmt: skip
    print(f"\nmeans over seeds {args.seeds}:")
    print_table(
        rows,
        [("variant", "variant", ""), ("env_steps", "env steps", ",.0f"), ("point", "", ""),
         ("return", "eval return", ".1f"), ("return_std", "± std", ".1f"),
         ("success", "eval success", ".2f"), ("wall_s", "median wall s (no eval)", ".0f")],
    )  # fmt: skip
    write_json(args.json, meta, {"runs": runs, "rows": rows})


if __name__ == "__main__":
    main()
