"""One SAC gradient step at HalfCheetah size, float32 against bfloat16 matmuls.

Run from the repository root:

    .venv/bin/python -m benchmarks.sac_update
    .venv/bin/python -m benchmarks.sac_update --hidden 256 --batch 256 --reps 9

Builds `SAC_PRESETS["mujoco_halfcheetah"]` twice (obs 17, action 6; `--hidden` x2 actor and
critics), once with `algorithm.sac.precision: bfloat16`, and times `algo.update(batch)` on
the same random batch in interleaved repetitions (median ms per update, and the ratio
within each repetition). The CPU's bf16 support decides the ratio: `lscpu | grep bf16`.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from tensordict import TensorDict

from benchmarks.common import base_parser, print_table, setup, time_interleaved, write_json
from rlcore.presets import SAC_PRESETS
from rlcore.trainer import Trainer


def build(precision: str, hidden: int) -> Trainer:
    base = SAC_PRESETS["mujoco_halfcheetah"]
    cfg = dataclasses.replace(
        base,
        policy=dataclasses.replace(base.policy, hidden_sizes=(hidden, hidden)),
        algo=dataclasses.replace(base.algo, precision=precision),
        trainer=dataclasses.replace(base.trainer, eval_every_iters=0),
        replay=dataclasses.replace(base.replay, capacity=1_000, warmup_steps=0),
    )
    return Trainer(cfg)


def random_batch(size: int, obs_dim: int, action_dim: int) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "obs": torch.randn(size, obs_dim, generator=gen),
            "action": torch.rand(size, action_dim, generator=gen) * 2 - 1,
            "reward": torch.randn(size, generator=gen),
            "next_obs": torch.randn(size, obs_dim, generator=gen),
            "terminated": torch.zeros(size, dtype=torch.bool),
        },
        batch_size=[size],
    )


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args(argv)
    meta = setup(
        args,
        f"SAC update, {args.hidden}x{args.hidden} networks, batch {args.batch}",
        method=f"interleaved repetitions (--reps {args.reps}); medians",
    )
    trainers = {p: build(p, args.hidden) for p in ("float32", "bfloat16")}
    env = trainers["float32"].env
    batch = random_batch(args.batch, env.obs_dim, env.action_dim)
    timings = time_interleaved(
        {p: (lambda t=t: t.algo.update(batch)) for p, t in trainers.items()}, args.reps
    )
    ratios = [
        b / f
        for f, b in zip(timings["float32"].samples_s, timings["bfloat16"].samples_s, strict=True)
    ]
    rows = [{"precision": p, "update_ms": t.median_s * 1e3} for p, t in timings.items()]
    print_table(rows, [("precision", "precision", ""), ("update_ms", "ms per update", ".2f")])
    ratio = statistics.median(ratios)
    print(f"bfloat16 / float32 (median of per-repetition ratios): {ratio:.3f}")
    write_json(args.json, meta, {"rows": rows, "ratio": ratio})


if __name__ == "__main__":
    main()
