"""Steps per second of Gymnasium vector envs raw and through rlcore's Gymnasium bridge.

Run from the repository root:

    .venv/bin/python -m benchmarks.gym_bridge
    .venv/bin/python -m benchmarks.gym_bridge --cases CartPole-v1:vector_entry_point --sizes 4096

For each case (`ENV_ID:VECTORIZATION`) and N, T-step sweeps with the same pre-drawn random
actions, timed alternately within every repetition (so both see the same background load):

- raw: `envs.step(actions[t])` on the Gymnasium vector env, numpy actions, nothing else;
- raw (bridge's mode): the same, for `sync`/`async`, with the vector env built the way the
  bridge builds it (same-step auto-reset, which puts the final observations in `info`; the
  default next-step mode would make the step after each episode's end a wasted transition);
- bridged: `GymnasiumEnv.step(slot.action, slot)` into `StepSlot`s that are views of a real
  [N, T+1] rollout, exactly as the collector calls it: the same actions sit in the rollout's
  action column (where the collector copies the policy's action before stepping; that copy
  is the collector's, done for every env, and is not timed), observation, reward and flags
  are copied into the rollout, final observations kept;
- bridged, outside action: `GymnasiumEnv.step(torch_action, slot)` with torch actions that
  are not the rollout's (evaluation's path): the bridge converts them with torch calls,
  each of which costs the numpy env's own step a few microseconds in cache effects.

The figures are bridged SPS / raw SPS (target >= 0.9) against Gymnasium's default mode, and
against the bridge's mode (the bridge's own cost, without Gymnasium's same-step bookkeeping).
All sweeps start from `reset(seed=0)` and run on their own env instance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import gymnasium.spaces as spaces
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from benchmarks.common import base_parser, print_table, setup, time_interleaved, verdict, write_json
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
    raw = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode=vectorization)
    raws = {"raw": raw}
    if vectorization in ("sync", "async"):
        raws["raw_same_mode"] = gymnasium.make_vec(
            env_id, num_envs=n, vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )  # fmt: skip
    actions = actions_for(raw.single_action_space, n, t)

    def raw_sweep(envs: gymnasium.vector.VectorEnv) -> Callable[[], None]:
        envs.reset(seed=0)

        def sweep() -> None:
            for action in actions:
                envs.step(action)

        return sweep

    bridge = GymnasiumEnv(env_id, n, vectorization=vectorization)
    rollout = make_rollout(RolloutSpec.for_env(bridge, t, with_value=True))
    slots = step_slots(rollout, with_valid=bridge.has_invalid_steps)
    rollout[OBS][:, 0] = bridge.reset(seed=0)
    torch_actions = [torch.from_numpy(a) for a in actions]
    for action, slot in zip(torch_actions, slots, strict=True):
        slot.action.copy_(action)  # where the collector puts the policy's action

    @torch.inference_mode()
    def bridged_sweep() -> None:
        for slot in slots:
            bridge.step(slot.action, slot)

    @torch.inference_mode()
    def outside_action_sweep() -> None:
        for action, slot in zip(torch_actions, slots, strict=True):
            bridge.step(action, slot)

    def close() -> None:
        for envs in raws.values():
            envs.close()
        bridge.close()

    raw_sweeps = {k: raw_sweep(v) for k, v in raws.items()}
    return {**raw_sweeps, "bridged": bridged_sweep, "outside": outside_action_sweep}, close


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[16, 64, 256])
    parser.add_argument("--num-steps", type=int, default=32, help="T steps per sweep")
    parser.add_argument("--min-rep-s", type=float, default=0.3)
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
            same_mode = sps.get("raw_same_mode", sps["raw"])
            rows.append({"case": case, "N": n, "raw_sps": sps["raw"], "same_mode_sps": same_mode,
                         "bridged_sps": sps["bridged"], "ratio": sps["bridged"] / sps["raw"],
                         "outside_ratio": sps["outside"] / sps["raw"],
                         "ratio_same_mode": sps["bridged"] / same_mode})  # fmt: skip
    print()
    print_table(
        rows,
        [("case", "env:vectorization", ""), ("N", "N", "d"), ("raw_sps", "raw SPS", ",.0f"),
         ("same_mode_sps", "raw SPS, bridge's mode", ",.0f"),
         ("bridged_sps", "bridged SPS", ",.0f"), ("ratio", "bridged/raw", ".3f"),
         ("ratio_same_mode", "bridged/raw same mode", ".3f"),
         ("outside_ratio", "outside action/raw", ".3f")],
    )  # fmt: skip
    print()
    for row in rows:
        same = row["ratio_same_mode"]
        print(f"{row['case']} N={row['N']}: bridged/raw {row['ratio']:.3f} (target >= {TARGET}): "
              f"{verdict(row['ratio'], TARGET, True)}; against the bridge's auto-reset mode "
              f"{same:.3f}: {verdict(same, TARGET, True)}")  # fmt: skip
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
