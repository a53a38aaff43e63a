"""One SAC gradient step at HalfCheetah size: float32 against bfloat16, and network sizes.

Run from the repository root:

    .venv/bin/python -m benchmarks.sac_update
    .venv/bin/python -m benchmarks.sac_update --hidden 256 --batch 256 --reps 9
    .venv/bin/python -m benchmarks.sac_update --hidden 256x256 400x300 --precisions bfloat16
    .venv/bin/python -m benchmarks.sac_update --compile --matmul --precisions float32

Builds `SAC_PRESETS["mujoco_halfcheetah"]` (obs 17, action 6) once per network size
(`--hidden`: `256` for 256x256, or `400x300`; actor and critics alike) and precision
(`algorithm.sac.precision`), and times `algo.update(batch)` on the same random batch in
interleaved repetitions: median ms per update, and ratios within each repetition
(bfloat16 / float32 per size; each size / the first size per precision). The CPU's bf16
support decides the precision ratio: `lscpu | grep bf16`. `--compile` adds the compiled
update (`runtime.compile: true`); `--matmul` profiles each setting for its milliseconds
inside matrix products, which compiling cannot shorten. Each setting's first update is
timed apart (compiling, for a compiled one; cold or warm as torch's on-disk cache is), and
a compiled row says after how many updates its savings repay that (`break-even`).
`--obs-dim` and `--action-dim` size the networks' inputs for other tasks (Humanoid-v5: 348
and 17).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import gymnasium.spaces as spaces
import torch
from tensordict import TensorDict

from benchmarks.common import (
    base_parser,
    hidden_sizes,
    matmul_ms_per_call,
    print_table,
    setup,
    time_interleaved,
    write_json,
)
from rlcore.algos.sac import SAC
from rlcore.policies import SquashedGaussianActor
from rlcore.presets import SAC_PRESETS

OBS_DIM, ACTION_DIM = 17, 6  # HalfCheetah-v5's

PRECISIONS = ("float32", "bfloat16")


def size_name(sizes: tuple[int, ...]) -> str:
    return "x".join(map(str, sizes))


def build(
    precision: str,
    hidden: tuple[int, ...],
    compiled: bool = False,
    device: str = "cpu",
    dims: tuple[int, int] = (OBS_DIM, ACTION_DIM),
) -> SAC:
    """The HalfCheetah preset's SAC (`dims`: obs 17, action 6) with `hidden` networks, built
    directly (no env: it runs where MuJoCo is not installed, on any device)."""
    base = SAC_PRESETS["mujoco_halfcheetah"]
    policy_cfg = dataclasses.replace(base.policy, hidden_sizes=hidden)
    algo = dataclasses.replace(base.algo, precision=precision)
    torch.manual_seed(0)
    obs_dim, action_dim = dims
    actor = SquashedGaussianActor(obs_dim, spaces.Box(-1.0, 1.0, (action_dim,)), policy_cfg)
    actor = actor.to(device)
    generator = torch.Generator(device=device).manual_seed(0)
    return SAC(
        actor, algo, algo.critic_hidden_sizes or hidden, policy_cfg.activation, generator,
        compile_update=compiled,
    )  # fmt: skip


def random_batch(size: int, obs_dim: int, action_dim: int, device: str = "cpu") -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    batch = TensorDict(
        {
            "obs": {"state": torch.randn(size, obs_dim, generator=gen)},
            "action": torch.rand(size, action_dim, generator=gen) * 2 - 1,
            "reward": torch.randn(size, generator=gen),
            "next_obs": {"state": torch.randn(size, obs_dim, generator=gen)},
            "terminated": torch.zeros(size, dtype=torch.bool),
        },
        batch_size=[size],
    )
    return batch.to(device)


def median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=hidden_sizes, nargs="+", default=[(256, 256)])
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--obs-dim", type=int, default=OBS_DIM)
    parser.add_argument("--action-dim", type=int, default=ACTION_DIM)
    parser.add_argument(
        "--compile", action="store_true",
        help="also time each setting with runtime.compile (the compiled update)",
    )  # fmt: skip
    parser.add_argument(
        "--matmul", action="store_true",
        help="also profile each setting: milliseconds in matrix products (CPU), the part "
        "of an update that compiling cannot shorten",
    )  # fmt: skip
    args = parser.parse_args(argv)
    sizes = list(dict.fromkeys(args.hidden))
    precisions = list(dict.fromkeys(args.precisions))
    meta = setup(
        args,
        f"SAC update, networks {', '.join(map(size_name, sizes))}, batch {args.batch}, "
        f"obs {args.obs_dim}, actions {args.action_dim}",
        method=f"interleaved repetitions (--reps {args.reps}); medians",
    )
    modes = [False, True] if args.compile else [False]
    dims = (args.obs_dim, args.action_dim)
    algos = {
        (s, p, c): build(p, s, c, args.device, dims)
        for s in sizes
        for p in precisions
        for c in modes
    }
    batch = random_batch(args.batch, *dims, args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else lambda: None

    def timed(algo: SAC) -> None:
        algo.update(batch)
        sync()

    first_s = {}
    for key, algo in algos.items():  # compiling happens here, for the compiled ones
        start = time.perf_counter()
        timed(algo)
        first_s[key] = time.perf_counter() - start

    timings = time_interleaved({key: (lambda a=a: timed(a)) for key, a in algos.items()}, args.reps)
    samples = {key: t.samples_s for key, t in timings.items()}
    matmul_ms = (
        {key: matmul_ms_per_call(lambda a=a: a.update(batch)) for key, a in algos.items()}
        if args.matmul
        else {}
    )
    rows = []
    for (size, precision, compiled), timing in timings.items():
        row = {"hidden": size_name(size), "precision": precision, "compiled": compiled}
        row["update_ms"] = timing.median_s * 1e3
        mine = samples[size, precision, compiled]
        row["vs_first_size"] = median_ratio(mine, samples[sizes[0], precision, compiled])
        if len(precisions) == 2:
            row["bf16_vs_f32"] = median_ratio(
                samples[size, "bfloat16", compiled], samples[size, "float32", compiled]
            )
        row["compiled_vs_eager"] = median_ratio(mine, samples[size, precision, False])
        row["first_s"] = first_s[size, precision, compiled]
        saved_s = timings[size, precision, False].median_s - timing.median_s
        extra_s = row["first_s"] - first_s[size, precision, False]
        row["break_even"] = (
            f"{extra_s / saved_s:,.0f}" if compiled and saved_s > 0 else "never" if compiled else ""
        )
        if args.matmul:
            row["matmul_ms"] = matmul_ms[size, precision, compiled]
            eager_ms = timings[size, precision, False].median_s * 1e3
            row["matmul_of_eager"] = row["matmul_ms"] / eager_ms
        rows.append(row)
    columns = [
        ("hidden", "hidden", ""),
        ("precision", "precision", ""),
        ("compiled", "compiled", ""),
        ("update_ms", "ms per update", ".2f"),
    ]
    if args.compile:
        columns.append(("compiled_vs_eager", "/ eager's", ".3f"))
        columns.append(("first_s", "first update s", ".1f"))
        columns.append(("break_even", "break-even updates", ""))
    if args.matmul:
        columns.append(("matmul_ms", "matmul ms", ".2f"))
        columns.append(("matmul_of_eager", "matmul / eager update", ".3f"))
    if len(sizes) > 1:
        columns.append(("vs_first_size", f"/ {size_name(sizes[0])}'s", ".3f"))
    if len(precisions) == 2:
        columns.append(("bf16_vs_f32", "bf16 / f32 (this size)", ".3f"))
    print_table(rows, columns)
    print("ratios: medians of the per-repetition ratios")
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
