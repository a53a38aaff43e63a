"""One SAC gradient step at HalfCheetah size: float32 against bfloat16, and network sizes.

Run from the repository root:

    .venv/bin/python -m benchmarks.sac_update
    .venv/bin/python -m benchmarks.sac_update --hidden 256 --batch 256 --reps 9
    .venv/bin/python -m benchmarks.sac_update --hidden 256x256 400x300 --precisions bfloat16

Builds `SAC_PRESETS["mujoco_halfcheetah"]` (obs 17, action 6) once per network size
(`--hidden`: `256` for 256x256, or `400x300`; actor and critics alike) and precision
(`algorithm.sac.precision`), and times `algo.update(batch)` on the same random batch in
interleaved repetitions: median ms per update, and ratios within each repetition
(bfloat16 / float32 per size; each size / the first size per precision). The CPU's bf16
support decides the precision ratio: `lscpu | grep bf16`.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from tensordict import TensorDict

from benchmarks.common import (
    base_parser,
    hidden_sizes,
    print_table,
    setup,
    time_interleaved,
    write_json,
)
from rlcore.presets import SAC_PRESETS
from rlcore.trainer import Trainer

PRECISIONS = ("float32", "bfloat16")


def size_name(sizes: tuple[int, ...]) -> str:
    return "x".join(map(str, sizes))


def build(precision: str, hidden: tuple[int, ...]) -> Trainer:
    base = SAC_PRESETS["mujoco_halfcheetah"]
    cfg = dataclasses.replace(
        base,
        policy=dataclasses.replace(base.policy, hidden_sizes=hidden),
        algo=dataclasses.replace(base.algo, precision=precision),
        trainer=dataclasses.replace(base.trainer, eval_every_iters=0),
        replay=dataclasses.replace(base.replay, capacity=1_000, warmup_steps=0),
    )
    return Trainer(cfg)


def random_batch(size: int, obs_dim: int, action_dim: int) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "obs": {"state": torch.randn(size, obs_dim, generator=gen)},
            "action": torch.rand(size, action_dim, generator=gen) * 2 - 1,
            "reward": torch.randn(size, generator=gen),
            "next_obs": {"state": torch.randn(size, obs_dim, generator=gen)},
            "terminated": torch.zeros(size, dtype=torch.bool),
        },
        batch_size=[size],
    )


def median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=hidden_sizes, nargs="+", default=[(256, 256)])
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args(argv)
    sizes = list(dict.fromkeys(args.hidden))
    precisions = list(dict.fromkeys(args.precisions))
    meta = setup(
        args,
        f"SAC update, networks {', '.join(map(size_name, sizes))}, batch {args.batch}",
        method=f"interleaved repetitions (--reps {args.reps}); medians",
    )
    trainers = {(s, p): build(p, s) for s in sizes for p in precisions}
    env = next(iter(trainers.values())).env
    batch = random_batch(args.batch, env.obs_dim, env.action_dim)
    timings = time_interleaved(
        {key: (lambda t=t: t.algo.update(batch)) for key, t in trainers.items()}, args.reps
    )
    samples = {key: t.samples_s for key, t in timings.items()}
    rows = []
    for (size, precision), timing in timings.items():
        row = {"hidden": size_name(size), "precision": precision}
        row["update_ms"] = timing.median_s * 1e3
        row["vs_first_size"] = median_ratio(samples[size, precision], samples[sizes[0], precision])
        if len(precisions) == 2:
            row["bf16_vs_f32"] = median_ratio(samples[size, "bfloat16"], samples[size, "float32"])
        rows.append(row)
    columns = [
        ("hidden", "hidden", ""),
        ("precision", "precision", ""),
        ("update_ms", "ms per update", ".2f"),
    ]
    if len(sizes) > 1:
        columns.append(("vs_first_size", f"/ {size_name(sizes[0])}'s", ".3f"))
    if len(precisions) == 2:
        columns.append(("bf16_vs_f32", "bf16 / f32 (this size)", ".3f"))
    print_table(rows, columns)
    print("ratios: medians of the per-repetition ratios")
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
