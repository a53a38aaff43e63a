"""PPO on the camera task, `push_cube_pixels`: what the critic reads, side by side.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.pixel_push_cube
    .venv/bin/python -m benchmarks.pixel_push_cube --variants pixels-state-critic --seeds 0

Every (variant, seed) is one `Trainer.run()` of the `push_cube_pixels` preset (PPO; the
actor reads the camera image and the pusher's own state) until evaluation success reaches
0.9 or `--steps` env steps. Variants differ in what the networks read:

- `pixels-state-critic`: the critic reads the privileged simulator state (asymmetric);
- `pixels-critic`: the critic reads what the actor reads (image and proprioception), with
  its own image encoder;
- `state`: actor and critic read the privileged state (the ceiling: no camera at all, so
  no auxiliary prediction either).

The camera variants keep the preset's `aux_obs: [privileged]` (the actor's image features
learn to predict the privileged state).

Reported per run: env steps and wall time (evaluation excluded) to success 0.9 (`-` if not
reached), and the last evaluation's success and return; medians over seeds follow.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.config import ExperimentConfig
from rlcore.presets import PRESETS
from rlcore.trainer import Trainer

TARGET = 0.9
# The camera task's preset (the actor reads the image and its own proprioception), up to 2M
# env steps, stopping at success 0.9.
BASE = dataclasses.replace(
    PRESETS["push_cube_pixels"],
    policy=dataclasses.replace(PRESETS["push_cube_pixels"].policy, actor_obs=("image", "proprio")),
    trainer=dataclasses.replace(
        PRESETS["push_cube_pixels"].trainer,
        total_env_steps=2_000_000,
        checkpoint_every_iters=0,
        stop_at_eval_success=TARGET,
    ),
)
VARIANTS: dict[str, dict[str, Any]] = {
    "pixels-state-critic": {"critic_obs": ("privileged",)},
    "pixels-critic": {"critic_obs": ("image", "proprio")},
    "state": {"actor_obs": ("privileged",), "critic_obs": ("privileged",), "aux_obs": ()},
}


def variant_config(variant: str, seed: int, steps: int) -> ExperimentConfig:
    policy = dataclasses.replace(BASE.policy, **VARIANTS[variant])
    trainer = dataclasses.replace(BASE.trainer, seed=seed, total_env_steps=steps)
    return dataclasses.replace(BASE, policy=policy, trainer=trainer)


def run(variant: str, seed: int, steps: int) -> dict[str, Any]:
    trainer = Trainer(variant_config(variant, seed, steps))
    row: dict[str, Any] = {"variant": variant, "seed": seed, "steps_to_target": None}
    eval_s = 0.0
    start = time.perf_counter()

    def sink(env_steps: int, metrics: dict[str, float]) -> None:
        nonlocal eval_s
        if "eval/success_rate" not in metrics:
            return
        eval_s += metrics.get("time/eval_s", 0.0)
        row["success"] = metrics["eval/success_rate"]
        row["return"] = metrics["eval/episode_return"]
        if row["steps_to_target"] is None and row["success"] >= TARGET:
            row["steps_to_target"] = env_steps
            row["wall_s_to_target"] = time.perf_counter() - start - eval_s

    trainer.sink = sink
    trainer.run()
    trainer.env.close()
    row["env_steps"] = trainer.env_steps
    return row


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=BASE.trainer.total_env_steps)
    args = parser.parse_args(argv)
    meta = setup(args, "pixel_push_cube", method="one run per variant and seed")
    rows = []
    for variant in args.variants:
        for seed in args.seeds:
            print(f"... {variant} seed {seed}", flush=True)
            rows.append(run(variant, seed, args.steps))
    for variant in args.variants:
        mine = [r for r in rows if r["variant"] == variant]
        reached = [r["steps_to_target"] for r in mine if r["steps_to_target"] is not None]
        rows.append({
            "variant": variant, "seed": "median",
            "steps_to_target": statistics.median(reached) if len(reached) == len(mine) else None,
            "success": statistics.median(r["success"] for r in mine),
            "return": statistics.median(r["return"] for r in mine),
        })  # fmt: skip
    print()
    print_table(
        rows,
        [("variant", "variant", ""), ("seed", "seed", ""),
         ("steps_to_target", f"env steps to success {TARGET}", ",.0f"),
         ("wall_s_to_target", "wall s (no eval)", ".0f"), ("success", "last success", ".2f"),
         ("return", "last return", ".1f"), ("env_steps", "env steps run", ",.0f")],
    )  # fmt: skip
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
