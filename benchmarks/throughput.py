"""Steps per second of the env, the policy, the collector and full PPO iterations.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.throughput
    .venv/bin/python -m benchmarks.throughput --envs cartpole --sizes 64 1024 --reps 2
    .venv/bin/python -m benchmarks.throughput --envs mujoco_halfcheetah --device cuda \
        --sizes 1024 8192 65536 --parts env bare train

`--envs` takes builtin env names and task presets (`rlcore.presets.PRESETS`: e.g.
`mujoco_halfcheetah`, the native MuJoCo backend, MuJoCo Warp on CUDA); `--device` puts
the env, the policy and the rollout there (CUDA timings synchronize after every timed call).
`env`, `bare` and `train` are the three columns Isaac Lab reports: env-only, +policy and
+train steps per second.

Parts (`--parts`, default all), each timed at every N of `--sizes`:

- env: `env.step(actions, slot)` with pre-drawn random actions and `StepSlot`s that are
  views into a real [N, T+1] rollout (`rlcore.rollout.step_slots`), T = `--num-steps`,
  under `torch.inference_mode()` as in the collector;
- act: `policy.act(obs[:, t])` under `torch.inference_mode()` with the task preset's policy;
- act_compiled, collector_compiled: the same through `rlcore.compiled_act` (the networks
  compiled, the draws eager), the collector without host checks as on the compiled path;
- collector_sync_free: the collector without host checks (eager act), as the fast path
  runs it for envs that live on the device: it bootstraps time-limit ends by a critic
  forward every step instead of a check; `coll sync-free/eager` against `collector`;
- collector_graphed (CUDA, builtin envs): the collector as `runtime.compile` runs it there,
  its T steps one CUDA graph (`rlcore.collection_graph`), against the ideal and the eager
  collector;
- collector: `SyncCollector.collect()` (N*T steps per call) and its overhead ratio
  `collector_sps / (N / (t_env_step + t_policy_act))` (1.0 = no overhead; target >= 0.9);
- bare: the collector's loop with nothing but `policy.act` and `env.step` into the same
  rollout slots (no copies, no episode tracking, no bootstrap values); `coll/bare` is
  collector SPS over bare-loop SPS, the collector's own overhead measured directly. The gap
  between `bare` and the ideal is the cost of alternating two code bodies: on the 2-core
  AMD EPYC this was measured on, an elementwise op's first call after an MKL GEMM costs
  3-10x its steady-state time, which inflates the env step ~2x when it follows a policy
  forward (see benchmarks/README.md, *throughput*);
- train: one full `Trainer` iteration (collect + PPO update + obs-norm update) with the
  preset's config, `env.num_envs = N`, evaluation off; T is the preset's `trainer.num_steps`
  unless `--train-num-steps` is given;
- gym (cartpole only): Gymnasium's numpy `CartPoleVectorEnv` stepped with random numpy
  actions, and the env-only ratio ours / gymnasium (target >= 1 at N = 4096).

env, act, collector, bare and gym are timed alternately within every repetition (so the ratios
between them see the same background load); each repetition of each repeats its call for at
least `--min-rep-s`. train runs afterwards, one iteration per repetition.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium
import gymnasium.spaces as spaces
import numpy as np
import torch
import yaml
from tensordict import TensorDict

from benchmarks.common import (
    base_parser,
    device_arg,
    preset_or_note,
    print_table,
    setup,
    time_calls,
    time_interleaved,
    verdict,
    write_json,
)
from rlcore.collection_graph import graph_refusal
from rlcore.collector import SyncCollector
from rlcore.compiled_act import CompiledAct
from rlcore.config import ExperimentConfig
from rlcore.envs import ENVS, BatchedEnv, EnvConfig, make_env
from rlcore.presets import PRESETS
from rlcore.rollout import OBS, RolloutSpec, make_rollout, step_slots
from rlcore.trainer import Trainer

PARTS = (
    "env", "act", "collector", "bare", "train", "gym", "act_compiled", "collector_compiled",
    "collector_graphed", "collector_sync_free",
)  # fmt: skip
COMPILED_PARTS = {"act_compiled", "collector_compiled", "collector_graphed"}  # not by default
OPT_IN_PARTS = COMPILED_PARTS | {"collector_sync_free"}
PRESET_PARTS = {"act", "collector", "bare", "train", "collector_sync_free"} | COMPILED_PARTS
TARGET_N = 4096
TARGET_COLLECTOR_RATIO = 0.9
TARGET_GYM_RATIO = 1.0


def rollout_for(env: BatchedEnv, num_steps: int) -> TensorDict:
    """A rollout laid out exactly as the Trainer lays it out for this env."""
    spec = RolloutSpec.for_env(env, num_steps, with_value=True)
    return make_rollout(spec)


def random_actions(env: BatchedEnv, count: int, seed: int = 0) -> torch.Tensor:
    """`count` batches of uniformly random valid actions: [count, N] or [count, N, A]."""
    gen = torch.Generator(device=env.device).manual_seed(seed)
    space, n = env.action_space, env.num_envs
    if isinstance(space, spaces.Discrete):
        return torch.randint(int(space.n), (count, n), generator=gen, device=env.device)
    low = torch.as_tensor(space.low, device=env.device)
    high = torch.as_tensor(space.high, device=env.device)
    u = torch.rand(count, n, env.action_dim, generator=gen, device=env.device)
    return low + u * (high - low)


def placed(env: EnvConfig, device: str, options: dict[str, Any]) -> EnvConfig:
    """`env` on `device`, its options updated by `options` (`--device`, `--env-options`)."""
    return dataclasses.replace(env, device=device, options={**env.options, **options})


def parse_env_options(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs, values read as YAML scalars (`engine=warp`, `nthread=2`)."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env-options takes KEY=VALUE pairs, got {item!r}")
        options[key] = yaml.safe_load(value)
    return options


def synchronized(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """`fn`, then a wait for the device's queued work (CUDA runs asynchronously)."""
    if device.type != "cuda":
        return fn

    def call() -> object:
        out = fn()
        torch.cuda.synchronize(device)
        return out

    return call


def env_sweep(cfg: EnvConfig, t: int) -> Callable[[], None]:
    """One T-step sweep of `env.step` with random actions into strided rollout slots.

    Runs under `torch.inference_mode()` like the collector does: outside it, stepping costs
    10-20% more (autograd version-counter bookkeeping on every in-place op).
    """
    env = make_env(cfg)
    rollout = rollout_for(env, t)
    slots = step_slots(rollout)
    rollout[OBS][:, 0] = env.reset(seed=0)
    actions = random_actions(env, t)

    @torch.inference_mode()
    def sweep() -> None:
        for action, slot in zip(actions, slots, strict=True):
            env.step(action, slot)

    return sweep


def experiment(
    base: ExperimentConfig, n: int, num_steps: int, reps: int, **trainer: Any
) -> ExperimentConfig:
    """The preset with N envs, T steps, no evaluation, and budget for warm-up + reps."""
    steps_per_iter = n * num_steps
    return dataclasses.replace(
        base,
        env=dataclasses.replace(base.env, num_envs=n),
        trainer=dataclasses.replace(
            base.trainer,
            num_steps=num_steps,
            eval_every_iters=0,
            checkpoint_every_iters=0,
            total_env_steps=steps_per_iter * (reps + 100),
            **trainer,
        ),
    )


def act_and_collect(
    base: ExperimentConfig,
    n: int,
    t: int,
    compiled: bool = False,
    graphed: bool = False,
    sync_free: bool = False,
) -> dict[str, Callable[[], object]]:
    """T `policy.act` calls on the rollout's observation views, one `collect()` call, and
    the bare act + step loop (its own env, policy weights and rollout layout); `compiled`:
    also the first two through `rlcore.compiled_act`; `graphed`: also the collector with
    its steps one CUDA graph (captured here), where the env allows it; `sync_free`: also
    the collector without host checks."""
    trainer = Trainer(experiment(base, n, t, reps=0))
    collector, policy = trainer.collector, trainer.policy
    collector.collect()  # realistic observations in the rollout
    obs = trainer.rollout[OBS]
    views = [obs[:, step] for step in range(t)]  # made once, as the collector does
    gen = torch.Generator(device=trainer.env.device).manual_seed(1)

    @torch.inference_mode()
    def acts() -> None:
        for view in views:
            policy.act(view, gen)

    bare_trainer = Trainer(experiment(base, n, t, reps=0))
    bare_trainer.policy.load_state_dict(policy.state_dict())
    bare_env, bare_policy = bare_trainer.env, bare_trainer.policy
    bare_obs, bare_slots = bare_trainer.rollout[OBS], step_slots(bare_trainer.rollout)
    bare_obs[:, 0] = bare_env.reset(seed=0)

    bare_views = [bare_obs[:, step] for step in range(t)]

    @torch.inference_mode()
    def bare() -> None:
        for view, slot in zip(bare_views, bare_slots, strict=True):
            bare_env.step(bare_policy.act(view, gen).action, slot)
        bare_obs[:, 0] = bare_obs[:, -1]

    fns: dict[str, Callable[[], object]] = {
        "act": acts, "collector": collector.collect, "bare": bare
    }  # fmt: skip
    if sync_free:
        fns["collector_sync_free"] = SyncCollector(
            trainer.env, policy, trainer.rollout, trainer.generator, host_checks=False
        ).collect
    if graphed and graph_refusal(trainer.env, host_checks=False, grouped=False) is None:
        graphed_collector = SyncCollector(
            trainer.env, policy, trainer.rollout, trainer.generator, host_checks=False,
            graph_steps=True,
        )  # fmt: skip
        graphed_collector.collect()  # runs and captures
        fns["collector_graphed"] = graphed_collector.collect
    if not compiled:
        return fns
    compiled_act = CompiledAct(policy)
    compiled_collector = SyncCollector(
        trainer.env, policy, trainer.rollout, trainer.generator, host_checks=False,
        compile_act=True,
    )  # fmt: skip

    @torch.inference_mode()
    def acts_compiled() -> None:
        for view in views:
            compiled_act.act(view, gen)

    return fns | {"act_compiled": acts_compiled, "collector_compiled": compiled_collector.collect}


def gym_cartpole_sweep(n: int, t: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """A T-step sweep of Gymnasium's numpy CartPoleVectorEnv (random actions), and close."""
    envs = gymnasium.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(t, n))

    def sweep() -> None:
        for action in actions:
            envs.step(action)

    return sweep, envs.close


def bench_train(
    base: ExperimentConfig, n: int, t: int, reps: int, compiled: bool = False
) -> dict[str, float]:
    """Median seconds of one Trainer iteration, and of its collect and update phases
    (`compiled`: `runtime.compile`'s path; its phases' times are then launch times, as
    nothing waits for the device within an iteration)."""
    cfg = experiment(base, n, t, reps)
    phases: list[dict[str, float]] = []
    trainer = Trainer(cfg, sink=lambda step, metrics: phases.append(metrics), compile_loss=compiled)
    iteration = synchronized(lambda: trainer.run(max_iters=1), trainer.env.device)
    timing = time_calls(iteration, reps, min_rep_s=0.0)
    timed = phases[-reps:]
    return {
        "train_T": t,
        "train_iter_s": timing.median_s,
        "train_sps": cfg.steps_per_iter / timing.median_s,
        "train_collect_s": float(np.median([m["time/collect_s"] for m in timed])),
        "train_update_s": float(np.median([m["time/update_s"] for m in timed])),
        "train_minibatches": timed[-1].get("train/minibatches", float("nan")),
    }


def _set_ratio(row: dict[str, Any], key: str, numerator: str, denominator: str) -> None:
    """`row[key]` = `row[numerator] / row[denominator]` where the row has both."""
    if numerator in row and denominator in row:
        row[key] = row[numerator] / row[denominator]


def run_size(
    task: str, n: int, base: ExperimentConfig | None, args: argparse.Namespace, parts: set[str]
) -> dict[str, Any]:
    """All requested parts at one N; env, act, collector and gym alternate within each rep."""
    t, reps, device, options = args.num_steps, args.reps, args.device, args.env_options
    if base is not None:  # the preset's env on --device, with --env-options
        base = dataclasses.replace(base, env=placed(base.env, device, options))
    row: dict[str, Any] = {"env": task, "N": n, "T": t}
    fns: dict[str, Callable[[], object]] = {}
    close: Callable[[], None] | None = None
    if "env" in parts:
        env_cfg = PRESETS[task].env if task in PRESETS else EnvConfig(task)  # with its options
        fns["env"] = env_sweep(placed(dataclasses.replace(env_cfg, num_envs=n), device, options), t)
    if base is not None and parts & {"act", "collector", "bare", "collector_sync_free"}:
        compiled = bool(parts & (COMPILED_PARTS - {"collector_graphed"}))
        graphed, sync_free = "collector_graphed" in parts, "collector_sync_free" in parts
        wanted = act_and_collect(base, n, t, compiled, graphed, sync_free)
        fns |= {k: f for k, f in wanted.items() if k in parts}
    if "gym" in parts and task == "cartpole":
        fns["gym"], close = gym_cartpole_sweep(n, t)
    fns = {name: synchronized(fn, torch.device(device)) for name, fn in fns.items()}
    try:
        timings = time_interleaved(fns, reps, args.min_rep_s)
    finally:
        if close is not None:
            close()
    sps = {name: n * t / timing.median_s for name, timing in timings.items()}
    if "env" in timings:
        row |= {"env_step_s": timings["env"].median_s / t, "env_sps": sps["env"]}
    if "act" in timings:
        row |= {"act_s": timings["act"].median_s / t, "act_sps": sps["act"]}
    for part in ("act_compiled", "collector_compiled"):
        if part in timings:
            row[f"{part}_sps"] = sps[part]
            plain = part.removesuffix("_compiled")
            if plain in timings:
                row[f"{part}_ratio"] = timings[part].median_s / timings[plain].median_s
    if "collector" in timings:
        row["collector_sps"] = sps["collector"]
        if "env_step_s" in row and "act_s" in row:
            row["ideal_sps"] = n / (row["env_step_s"] + row["act_s"])
            row["collector_ratio"] = row["collector_sps"] / row["ideal_sps"]
    if "collector_sync_free" in timings:
        row["collector_sync_free_sps"] = sps["collector_sync_free"]
        _set_ratio(row, "sync_free_over_eager", "collector_sync_free_sps", "collector_sps")
    if "collector_graphed" in timings:
        row["collector_graphed_sps"] = sps["collector_graphed"]
        _set_ratio(row, "collector_graphed_ratio", "collector_graphed_sps", "ideal_sps")
        _set_ratio(row, "graphed_over_eager", "collector_graphed_sps", "collector_sps")
    if "bare" in timings:
        row["bare_sps"] = sps["bare"]
        _set_ratio(row, "collector_over_bare", "collector_sps", "bare_sps")
        _set_ratio(row, "bare_ratio", "bare_sps", "ideal_sps")
    if "gym" in timings:
        row["gym_sps"] = sps["gym"]
        if "env_sps" in row:
            row["ours_over_gym"] = row["env_sps"] / row["gym_sps"]
    if base is not None and "train" in parts:
        t_train = args.train_num_steps or base.trainer.num_steps
        row |= bench_train(base, n, t_train, reps, args.compile)
    return row


COLUMNS: list[tuple[str, str, str]] = [
    ("env", "env", ""),
    ("N", "N", "d"),
    ("env_sps", "env SPS", ",.0f"),
    ("act_sps", "act SPS", ",.0f"),
    ("collector_sps", "collector SPS", ",.0f"),
    ("collector_ratio", "coll/ideal", ".3f"),
    ("bare_sps", "bare SPS", ",.0f"),
    ("bare_ratio", "bare/ideal", ".3f"),
    ("collector_over_bare", "coll/bare", ".3f"),
    ("act_compiled_ratio", "act compiled/eager", ".2f"),
    ("collector_compiled_ratio", "coll compiled/eager", ".2f"),
    ("sync_free_over_eager", "coll sync-free/eager SPS", ".3f"),
    ("collector_graphed_ratio", "coll graphed/ideal", ".3f"),
    ("graphed_over_eager", "coll graphed/eager", ".2f"),
    ("train_T", "train T", "d"),
    ("train_sps", "train SPS", ",.0f"),
    ("train_collect_s", "collect s", ".4f"),
    ("train_update_s", "update s", ".4f"),
    ("gym_sps", "gym SPS", ",.0f"),
    ("ours_over_gym", "ours/gym", ".2f"),
]


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Check the targets at N = 4096 (only where measured)."""
    checks = []
    for row in rows:
        if row["N"] != TARGET_N:
            continue
        specs: list[tuple[str, str, float]] = [
            ("collector_ratio", "collector SPS / ideal SPS", TARGET_COLLECTOR_RATIO),
            ("ours_over_gym", "env SPS ours / gymnasium", TARGET_GYM_RATIO),
        ]
        for key, label, target in specs:
            if key in row:
                checks.append(
                    {
                        "env": row["env"],
                        "N": row["N"],
                        "figure": label,
                        "value": row[key],
                        "target": f">= {target}",
                        "verdict": verdict(row[key], target, higher_is_better=True),
                    }
                )
    return checks


def _row_line(row: dict[str, Any]) -> str:
    """One size's figures on one line, printed as it ends (a killed run keeps what it measured)."""
    return ", ".join(
        f"{key} {value:,.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in row.items()
        if key not in ("env", "N", "T")
    )


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--envs",
        nargs="+",
        default=["cartpole", "push_cube"],
        choices=sorted(set(ENVS) | set(PRESETS)),
        help="builtin env names or task presets",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument(
        "--env-options",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="env options over the preset's, e.g. engine=warp (MuJoCo Warp on Warp's CPU)",
    )
    parser.add_argument("--sizes", nargs="+", type=int, default=[64, 1024, 4096, 16384])
    parser.add_argument("--num-steps", type=int, default=32, help="T for env/act/collector")
    parser.add_argument(
        "--train-num-steps", type=int, default=None, help="T of the train part (preset's)"
    )
    parser.add_argument(
        "--parts", nargs="+", choices=PARTS,
        default=[part for part in PARTS if part not in OPT_IN_PARTS],
    )  # fmt: skip
    parser.add_argument("--compile", action="store_true", help="train part: runtime.compile's path")
    parser.add_argument(
        "--min-rep-s",
        type=float,
        default=0.2,
        help="each repetition repeats a sweep for at least this long (train: one iteration)",
    )
    args = parser.parse_args(argv)
    args.env_options = parse_env_options(args.env_options)
    device_arg(args.device)
    meta = setup(args, "rlcore throughput (steps per second)")
    parts = set(args.parts)
    print(
        f"T = {args.num_steps} for env/act/collector; device {args.device}; SPS = env steps (all N "
        "instances) per second; coll/ideal = collector SPS / (N / (t_env_step + t_act)); "
        "bare = act + env.step only, no collector bookkeeping"
    )
    rows: list[dict[str, Any]] = []
    for task in args.envs:
        base = None
        if parts & PRESET_PARTS:
            base = preset_or_note(task, f"{'/'.join(sorted(parts & PRESET_PARTS))} for {task}")
        for n in args.sizes:
            print(f"... {task} N={n}", flush=True)
            rows.append(run_size(task, n, base, args, parts))
            print("    " + _row_line(rows[-1]), flush=True)  # each size as it ends: long runs
    print()
    print_table(rows, [c for c in COLUMNS if any(c[0] in r for r in rows)])
    checks = summarize(rows)
    if checks:
        print()
        print(f"targets at N = {TARGET_N}:")
        print_table(
            checks,
            [
                ("env", "env", ""),
                ("figure", "figure", ""),
                ("value", "value", ".3f"),
                ("target", "target", ""),
                ("verdict", "verdict", ""),
            ],
        )
    write_json(args.json, meta, {"rows": rows, "targets": checks})


if __name__ == "__main__":
    main()
