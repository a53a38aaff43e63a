"""Steps per second of Gymnasium vector envs raw and through rlcore's Gymnasium bridge.

Run from the repository root:

    .venv/bin/python -m benchmarks.gym_bridge
    .venv/bin/python -m benchmarks.gym_bridge --cases CartPole-v1:vector_entry_point --sizes 4096

For each case (`ENV_ID:VECTORIZATION`) and N, T-step sweeps with the same pre-drawn random
actions, timed alternately within every repetition (so both see the same background load):

- raw: `envs.step(actions[t])` on the Gymnasium vector env, numpy actions, nothing else;
- bridged: `GymnasiumEnv.step(slot.action, slot)` into `StepSlot`s that are views of a real
  [N, T+1] rollout, exactly as the collector calls it: the same actions sit in the rollout's
  action column (where the collector copies the policy's action before stepping; that copy
  is the collector's, done for every env, and is not timed), observation, reward and flags
  are copied into the rollout, final observations kept;
- bridged, outside action: `GymnasiumEnv.step(torch_action, slot)` with torch actions that
  are not the rollout's (evaluation's path): the bridge converts them with torch calls,
  each of which costs the numpy env's own step a few microseconds in cache effects;
- for `sync`/`async`, raw and bridged (collector's path) again with same-step auto-reset
  (`autoreset="same-step"`, what grouped episodes use), which puts the final observations
  in `info` on every `done`.

The figures are bridged SPS / raw SPS (target >= 0.9), in Gymnasium's default next-step
mode (the bridge's default) and, for `sync`/`async`, in same-step mode. Each is the median
over repetitions of the ratio within one repetition (raw time / bridged time of sweeps run
back to back), which cancels the slow drifts of a shared machine's load; the ratio of the
two median SPS is printed beside it (`ratio of medians`), and the spread of the paired
ratios (their 25th-75th percentiles). All sweeps start from
`reset(seed=0)` and run on their own env instance. SPS counts every `step` call, as
Gymnasium's raw figures do; in next-step mode one step per episode is a reset step (invalid
for training, both raw and bridged).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import gymnasium
import gymnasium.spaces as spaces
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from benchmarks.common import (
    base_parser,
    paired_ratios,
    print_table,
    setup,
    time_interleaved,
    verdict,
    write_json,
)
from rlcore.envs.gym_bridge import GymnasiumEnv
from rlcore.rollout import OBS, RolloutSpec, make_rollout, step_slots

TARGET = 0.9
DEFAULT_CASES = ("CartPole-v1:vector_entry_point", "CartPole-v1:sync", "Pendulum-v1:sync")


def actions_for(space: spaces.Space, n: int, t: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, int(space.n), size=(t, n))
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    return (low + rng.random((t, n, *space.shape), dtype=np.float32) * (high - low)).astype(
        np.float32
    )


def sweeps(
    env_id: str, vectorization: str, n: int, t: int
) -> tuple[dict[str, Callable[[], None]], Callable[[], None]]:
    """The timed sweeps of one case and N (see the module docstring), and a closer."""
    modes = {"": {}}  # sweep-name suffix: the bridge's options
    if vectorization in ("sync", "async"):
        modes["_same_step"] = {"autoreset": "same-step"}
    raws = {
        f"raw{suffix}": gymnasium.make_vec(
            env_id, num_envs=n, vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP} if options else {},
        )
        for suffix, options in modes.items()
    }  # fmt: skip
    bridges = {
        suffix: GymnasiumEnv(env_id, n, vectorization=vectorization, **options)
        for suffix, options in modes.items()
    }
    actions = actions_for(raws["raw"].single_action_space, n, t)
    torch_actions = [torch.from_numpy(a) for a in actions]

    def raw_sweep(envs: gymnasium.vector.VectorEnv) -> Callable[[], None]:
        envs.reset(seed=0)

        def sweep() -> None:
            for action in actions:
                envs.step(action)

        return sweep

    def bridged_sweeps(bridge: GymnasiumEnv) -> tuple[Callable[[], None], Callable[[], None]]:
        rollout = make_rollout(RolloutSpec.for_env(bridge, t, with_value=True))
        slots = step_slots(rollout, with_valid=bridge.has_invalid_steps)
        rollout[OBS][:, 0] = bridge.reset(seed=0)
        for action, slot in zip(torch_actions, slots, strict=True):
            slot.action.copy_(action)  # where the collector puts the policy's action

        @torch.inference_mode()
        def collector_path() -> None:
            for slot in slots:
                bridge.step(slot.action, slot)

        @torch.inference_mode()
        def outside_action() -> None:
            for action, slot in zip(torch_actions, slots, strict=True):
                bridge.step(action, slot)

        return collector_path, outside_action

    fns = {name: raw_sweep(envs) for name, envs in raws.items()}
    for suffix, bridge in bridges.items():
        fns[f"bridged{suffix}"], outside = bridged_sweeps(bridge)
        if not suffix:
            fns["outside"] = outside

    def close() -> None:
        for env in (*raws.values(), *bridges.values()):
            env.close()

    return fns, close


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[16, 64, 256])
    parser.add_argument("--num-steps", type=int, default=32, help="T steps per sweep")
    parser.add_argument("--min-rep-s", type=float, default=0.1)
    parser.set_defaults(reps=21)
    args = parser.parse_args(argv)
    meta = setup(args, "gym_bridge")
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        env_id, _, vectorization = case.partition(":")
        for n in args.sizes:
            print(f"... {case} N={n}", flush=True)
            fns, close = sweeps(env_id, vectorization or "sync", n, args.num_steps)
            try:
                timings = time_interleaved(fns, args.reps, args.min_rep_s)
            finally:
                close()
            sps = {k: n * args.num_steps / v.median_s for k, v in timings.items()}
            paired = paired_ratios(timings["raw"], timings["bridged"])
            quartiles = statistics.quantiles(paired, n=4)
            same = None
            if "raw_same_step" in sps:
                same = statistics.median(
                    paired_ratios(timings["raw_same_step"], timings["bridged_same_step"])
                )
            rows.append({"case": case, "N": n, "raw_sps": sps["raw"],
                         "bridged_sps": sps["bridged"], "ratio": statistics.median(paired),
                         "ratio_q1": quartiles[0], "ratio_q3": quartiles[2],
                         "ratio_of_medians": sps["bridged"] / sps["raw"],
                         "outside_ratio": statistics.median(
                             paired_ratios(timings["raw"], timings["outside"])),
                         "raw_same_step_sps": sps.get("raw_same_step"),
                         "ratio_same_step": same})  # fmt: skip
    print()
    print_table(
        rows,
        [("case", "env:vectorization", ""), ("N", "N", "d"), ("raw_sps", "raw SPS", ",.0f"),
         ("bridged_sps", "bridged SPS", ",.0f"), ("ratio", "bridged/raw", ".3f"),
         ("ratio_q1", "q25", ".3f"), ("ratio_q3", "q75", ".3f"),
         ("ratio_of_medians", "ratio of medians", ".3f"),
         ("outside_ratio", "outside action/raw", ".3f"),
         ("raw_same_step_sps", "raw SPS same-step", ",.0f"),
         ("ratio_same_step", "bridged/raw same-step", ".3f")],
    )  # fmt: skip
    print()
    for row in rows:
        line = (f"{row['case']} N={row['N']}: bridged/raw {row['ratio']:.3f} "
                f"(target >= {TARGET}): {verdict(row['ratio'], TARGET, True)}")  # fmt: skip
        if row["ratio_same_step"] is not None:
            same = row["ratio_same_step"]
            line += f"; same-step {same:.3f}: {verdict(same, TARGET, True)}"
        print(line)
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
