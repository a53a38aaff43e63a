"""Steps per second of the native batched MuJoCo env against the bare engine and Gymnasium.

Run from the repository root:

    .venv/bin/python -m benchmarks.mujoco_batch
    .venv/bin/python -m benchmarks.mujoco_batch --task Ant --sizes 64 1024 --nthread 2

For each N, T-step sweeps with the same pre-drawn random actions, timed alternately within
every repetition (so all see the same background load):

- bare: `mujoco.batch.Batch.step(nstep=frame_skip)` after writing the controls (numpy), on
  `--nthread` threads: the engine alone, nothing read back. Each sweep starts from the
  native env's current state (one copy of the state rows), so both step the same physics:
  the cost of a step depends on the contacts, and an engine stepped alone drifts into other
  states than the env's, which resets;
- native: `MujocoEnv.step(slot.action, slot)`, as the collector calls it, on `StepSlot`s
  that are views of a real [N, T+1] rollout whose action column holds the same actions:
  clipped controls, the step, observation, reward, termination, time limit, final
  observations and auto-resets, all written into the rollout;
- gym sync (N <= --gym-max-n): Gymnasium's `SyncVectorEnv` of `<task>-v5`, numpy actions.

Figures: native / bare (target >= 0.9 at N >= 64) and native / gym sync (target >= 2.5 at
N = 64), each the median over repetitions of the ratio within one repetition (the sweeps
run back to back), which cancels the slow load drifts of a shared machine; the quartiles of
native / bare are printed beside it. Torch threads: --threads (default 1; the engine's own
threads are --nthread).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import torch

from benchmarks.common import (
    base_parser,
    paired_ratios,
    print_table,
    setup,
    time_interleaved,
    verdict,
    write_json,
)
from rlcore.envs.gym_build import gymnasium_build_context
from rlcore.envs.mujoco_batch import MujocoEnv
from rlcore.rollout import ACTION, OBS, RolloutSpec, make_rollout, step_slots

BARE_TARGET, GYM_TARGET = 0.9, 2.5


def sweeps(
    task: str, n: int, t: int, nthread: int, with_gym: bool
) -> tuple[dict[str, Callable[[], None]], Callable[[], None]]:
    env = MujocoEnv(task, n, nthread=nthread)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(t, n, env.action_dim)).astype(np.float32)

    bare = MujocoEnv(task, n, nthread=nthread).engine
    batch, ctrl, frame_skip = bare.batch, bare.ctrl.numpy(), env.task.frame_skip
    bare_state, env_state = bare.state(), env.engine.state()

    def bare_sweep() -> None:
        bare_state.copy_(env_state)
        for action in actions:
            ctrl[...] = action
            batch.step(nstep=frame_skip)

    rollout = make_rollout(RolloutSpec.for_env(env, t, with_value=True))
    slots = step_slots(rollout)
    rollout[OBS][:, 0] = env.reset(seed=0)
    rollout[ACTION][:, :t] = torch.from_numpy(actions).transpose(0, 1)

    @torch.inference_mode()
    def native_sweep() -> None:
        for slot in slots:
            env.step(slot.action, slot)

    fns: dict[str, Callable[[], None]] = {"bare": bare_sweep, "native": native_sweep}
    gym_envs = None
    if with_gym:
        with gymnasium_build_context(f"{task}-v5"):  # not one print per instance
            gym_envs = gymnasium.make_vec(f"{task}-v5", num_envs=n, vectorization_mode="sync")
        gym_envs.reset(seed=0)

        def gym_sweep() -> None:
            for action in actions:
                gym_envs.step(action)

        fns["gym"] = gym_sweep

    def close() -> None:
        env.close()
        if gym_envs is not None:
            gym_envs.close()

    return fns, close


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--task", default="HalfCheetah", choices=["HalfCheetah", "Hopper", "Ant"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024])
    parser.add_argument("--nthread", type=int, default=2, help="the engine's threads")
    parser.add_argument("--num-steps", type=int, default=32, help="T steps per sweep")
    parser.add_argument("--gym-max-n", type=int, default=64, help="largest N run through gym")
    parser.add_argument("--min-rep-s", type=float, default=0.1)
    parser.set_defaults(reps=21)
    args = parser.parse_args(argv)
    meta = setup(args, "mujoco_batch")
    print(f"task {args.task} | engine threads {args.nthread} (--nthread) | T {args.num_steps}")
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        print(f"... N={n}", flush=True)
        fns, close = sweeps(args.task, n, args.num_steps, args.nthread, n <= args.gym_max_n)
        try:
            timings = time_interleaved(fns, args.reps, args.min_rep_s)
        finally:
            close()
        sps = {k: n * args.num_steps / v.median_s for k, v in timings.items()}
        gym = sps.get("gym")
        over_bare = paired_ratios(timings["bare"], timings["native"])
        quartiles = statistics.quantiles(over_bare, n=4)
        over_gym = paired_ratios(timings["gym"], timings["native"]) if gym else None
        rows.append({
            "N": n, "bare_sps": sps["bare"], "native_sps": sps["native"],
            "gym_sps": gym if gym is not None else float("nan"),
            "native_over_bare": statistics.median(over_bare),
            "q1": quartiles[0], "q3": quartiles[2],
            "native_over_gym": statistics.median(over_gym) if over_gym else float("nan"),
        })  # fmt: skip
    print()
    print_table(
        rows,
        [("N", "N", "d"), ("bare_sps", "bare batch SPS", ",.0f"),
         ("native_sps", "native env SPS", ",.0f"), ("gym_sps", "gym sync SPS", ",.0f"),
         ("native_over_bare", "native/bare", ".3f"), ("q1", "q25", ".3f"), ("q3", "q75", ".3f"),
         ("native_over_gym", "native/gym", ".2f")],
    )  # fmt: skip
    print()
    for row in rows:
        if row["N"] >= 64:
            ratio = row["native_over_bare"]
            print(f"N={row['N']}: native/bare {ratio:.3f} (target >= {BARE_TARGET}): "
                  f"{verdict(ratio, BARE_TARGET, True)}")  # fmt: skip
        if row["N"] == 64 and row["native_over_gym"] == row["native_over_gym"]:
            ratio = row["native_over_gym"]
            print(f"N=64: native/gym sync {ratio:.2f} (target >= {GYM_TARGET}): "
                  f"{verdict(ratio, GYM_TARGET, True)}")  # fmt: skip
    write_json(args.json, meta, {"task": args.task, "nthread": args.nthread, "rows": rows})


if __name__ == "__main__":
    main()
