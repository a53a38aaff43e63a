"""Changing only `env.name`: what `preset: auto` picks against Stable-Baselines3's defaults.

Run from the repository root (needs the `bench` extra; `mujoco` for the MuJoCo envs):

    .venv/bin/python -m benchmarks.env_defaults                            # 4 envs, 3 seeds
    .venv/bin/python -m benchmarks.env_defaults --envs Acrobot-v1 Pendulum-v1 --seeds 0
    .venv/bin/python -m benchmarks.env_defaults --envs mujoco:Hopper --impls ours --steps 1000000
    .venv/bin/python -m benchmarks.env_defaults --envs Hopper-v5 --curve-every 51200
    .venv/bin/python -m benchmarks.env_defaults --envs Swimmer-v5 --impls ours \
        --set algorithm.ppo.gamma=0.995                # a probe: one key changed
    .venv/bin/python -m benchmarks.env_defaults --algorithm sac --envs Humanoid-v5 \
        --impls ours --steps 100000 --set replay.batch_size=256     # SAC against SAC's
    .venv/bin/python -m benchmarks.env_defaults --algorithm sac --envs HumanoidStandup-v5 \
        --impls ours --steps 100000 --seeds 9 --trace /tmp/trace   # and its statistics
    .venv/bin/python -m benchmarks.env_defaults --algorithm sac --envs HumanoidStandup-v5 \
        --impls ours --steps 100000 --seeds 6 --sac-path one-function-eager  # see run_ours

For each Gymnasium env and seed, ours is what a `params.yaml` holding only `env: {name:
"gymnasium:<id>"}` trains (`preset: auto`: the env's own preset where it has one,
HalfCheetah-v5's and Hopper-v5's, else its task family's settings; `pipelines.params`), for
`--steps` env steps (default 300k; Pendulum 100k); SB3 is `PPO("MlpPolicy", env)` with every
default (one env). A name with a prefix (`mujoco:Hopper`, the native batched task) is
trained as is, by ours alone. The two take turns per seed. Each is then evaluated on 10
deterministic episodes with seeds training never used. Prints mean and std over seeds of the
return, and the mean CPU time of training (process time, one torch thread each; evaluation
excluded) and its wall time, and of that CPU, how much went into the env's steps (each
learner's vector env: the simulator and the env's own Python, under that learner's policy;
`step_cpu`), so that the CPU each learner spends beyond the simulator compares too. Targets:
our mean return >= SB3's, at <= 0.5x its CPU time. `--set KEY=VALUE` (a params.yaml key,
dotted; the value read as YAML) changes ours from what `env.name` alone gives, to probe one
setting; `preset` names a preset instead of `auto` (`--set preset=gym_locomotion`: the
family's settings on a task with a preset of its own); `--set runtime.compile=false` trains
ours eager where `runtime.compile: auto` would compile it.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import base_parser, mean_std, print_table, setup, write_json
from pipelines.files import write_csv
from pipelines.params import Params, parse_params
from pipelines.params.load import set_path
from rlcore.config import ExperimentConfig
from rlcore.trainer import Trainer

EVAL_EPISODES = 10
DEFAULT_ENVS = ["Hopper-v5", "HalfCheetah-v5", "Acrobot-v1", "Pendulum-v1"]
DEFAULT_STEPS = {"Pendulum-v1": 100_000}  # the rest: --steps


def env_name(env_id: str) -> str:
    """A Gymnasium id goes through the bridge; a name with a prefix (`mujoco:Hopper`) as is."""
    return env_id if ":" in env_id else f"gymnasium:{env_id}"


def experiment(
    env_id: str, steps: int, algorithm: str = "ppo", settings: dict[str, Any] | None = None
) -> ExperimentConfig:
    """What a params.yaml holding only `env.name` (and `algorithm.name`) trains for `steps`;
    with `settings` (dotted params keys), also those."""
    return params_for(env_id, steps, algorithm, settings).experiment(seed=0)


def params_for(
    env_id: str, steps: int, algorithm: str = "ppo", settings: dict[str, Any] | None = None
) -> Params:
    """That params.yaml itself (its `runtime` section too: `--set runtime.compile=false`)."""
    data: dict[str, Any] = {
        "env": {"name": env_name(env_id)},
        "trainer": {"total_env_steps": steps},
    }
    if algorithm != "ppo":
        data["algorithm"] = {"name": algorithm}
    for dotted, value in (settings or {}).items():
        set_path(data, dotted, value)
    return parse_params(data)


def parse_settings(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings as dotted params keys and YAML values; SystemExit on a bad one."""
    settings = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise SystemExit(
                f"error: --set {item!r}: expected KEY=VALUE (algorithm.ppo.gamma=0.99)"
            )
        settings[key] = yaml.safe_load(text)
    return settings


def time_method(owner: Any, method: str) -> list[float]:
    """Time `owner.<method>` from now on: the returned cell holds its summed CPU seconds
    (this process's) and wall seconds. CPU, not wall, is what gets subtracted from or
    compared with process CPU: on a busy machine (another process on the core) wall time
    exceeds CPU time and would be subtracted wrongly."""
    spent = [0.0, 0.0]
    inner = getattr(owner, method)

    def timed(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - cpu
            spent[1] += time.perf_counter() - wall

    setattr(owner, method, timed)
    return spent


def evaluation_cpu(trainer: Trainer) -> list[float]:
    """Time `trainer`'s evaluations: training CPU is the process's minus their CPU."""
    return time_method(trainer, "_evaluate")


def step_cpu(env: Any, method: str) -> list[float]:
    """Time `env.<method>` (a vector env's step). Ours and SB3 each step a Gymnasium env
    through their own vector layer, so the CPU sum is what the simulator and the env's Python
    cost under each learner's own policy, and train CPU minus it is the learner's own."""
    return time_method(env, method)


def run_ours(
    env_id: str,
    seed: int,
    steps: int,
    curve_every: int = 0,
    *,
    algorithm: str = "ppo",
    eval_episodes: int = EVAL_EPISODES,
    settings: dict[str, Any] | None = None,
    trace: Path | None = None,
    sac_path: str = "default",
) -> dict[str, Any]:
    """Train and evaluate one seed (with `settings` changed: see `experiment`); with
    `curve_every` > 0 also evaluate every that many env steps, print each point and keep them
    in the row's `curve` (env steps, return, CPU s); with `trace`, write the training
    statistics there as CSV (`write_trace`)."""
    params = params_for(env_id, steps, algorithm, settings)
    cfg = params.experiment(seed=0)
    every = max(1, curve_every // cfg.steps_per_iter) if curve_every > 0 else 0
    trainer_cfg = dataclasses.replace(
        cfg.trainer, seed=seed, eval_every_iters=every, eval_episodes=eval_episodes,
        stop_at_eval_return=None, stop_at_eval_success=None,
    )  # fmt: skip
    # `runtime.compile` at its default (unless `settings` set it), as a file holding only
    # `env.name` decides it.
    compiled, _ = params.runtime.compiles(cfg)
    if compiled:  # compile in this process, so that its CPU time counts in the run's
        import torch._inductor.config

        torch._inductor.config.compile_threads = 1
    cpu, wall = time.process_time(), time.perf_counter()
    if sac_path == "one-function-eager":
        trainer = one_function_eager_trainer(dataclasses.replace(cfg, trainer=trainer_cfg))
    else:
        trainer = Trainer(dataclasses.replace(cfg, trainer=trainer_cfg), compile_loss=compiled)
    eval_cpu = evaluation_cpu(trainer)
    # A Gymnasium env's vector env (the bridge's `envs`); a native env has no separate step.
    vector_env = getattr(trainer.env, "envs", None)
    env_cpu = step_cpu(vector_env, "step") if vector_env is not None else None
    curve: list[tuple[int, float, float]] = []

    traced: list[dict[str, float]] = []
    window: dict[str, list[float]] = {}

    def sink(step: int, metrics: dict[str, float]) -> None:
        if trace is not None and "eval/episode_return" not in metrics:
            for key, value in metrics.items():
                window.setdefault(key, []).append(value)
            if not traced or step >= traced[-1]["env_steps"] + TRACE_EVERY:
                means = {key: statistics.fmean(values) for key, values in window.items()}
                traced.append({"env_steps": step, **means})
                window.clear()
        if every and "eval/episode_return" in metrics:
            point = (step, metrics["eval/episode_return"], time.process_time() - cpu - eval_cpu[0])
            curve.append(point)
            print(f"  ours {env_id} seed {seed}: {point[0]:,d} env steps, eval return "
                  f"{point[1]:.1f}, train CPU {point[2]:.1f} s", flush=True)  # fmt: skip

    trainer.sink = sink
    result = trainer.run()
    cpu_s = time.process_time() - cpu - eval_cpu[0]
    wall_s = time.perf_counter() - wall - eval_cpu[1]
    trainer.env.close()
    if trainer.eval_env is not None:
        trainer.eval_env.close()
    if trace is not None:
        if window:  # the iterations since the last row
            means = {key: statistics.fmean(values) for key, values in window.items()}
            traced.append({"env_steps": result.env_steps, **means})
        write_trace(trace, traced)
    ret = result.eval_metrics["eval/episode_return"]
    ours = row("ours", env_id, seed, result.env_steps, ret, cpu_s, wall_s)
    ours["env_cpu_s"] = env_cpu[0] if env_cpu is not None else None
    path = {"sac_path": sac_path} if sac_path != "default" else {}
    return ours | {"curve": curve, "compiled": compiled and sac_path == "default"} | path


def one_function_eager_trainer(cfg: ExperimentConfig) -> Trainer:
    """A SAC trainer whose update is the compiled path's one function, not compiled."""
    import rlcore.algos.sac as sac_module

    compile_it = sac_module.compiled
    sac_module.compiled = lambda fn, **options: fn
    try:
        trainer = Trainer(cfg, compile_loss=True)
    finally:
        sac_module.compiled = compile_it
    if not getattr(trainer.algo, "_one_function", False):
        raise SystemExit("--sac-path one-function-eager: this run's SAC update is no one function")
    return trainer


TRACE_EVERY = 1_000  # env steps between the rows of a trace


def write_trace(path: Path, rows: list[dict[str, float]]) -> None:
    """The training statistics (losses, Q values, temperature, entropy, ...) of one run as
    CSV, a row about every `TRACE_EVERY` env steps holding their means over the iterations
    since the row before: where two runs part, and in what."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(path, list(dict.fromkeys(key for r in rows for key in r)), rows)
    print(f"  trace: {len(rows)} rows in {path}", flush=True)


def trace_path(folder: Path | None, env_id: str, seed: int) -> Path | None:
    """Where `--trace` writes one run's statistics (None: not asked for)."""
    return None if folder is None else folder / f"{env_id.replace(':', '_')}-seed{seed}.csv"


def run_sb3(
    env_id: str,
    seed: int,
    steps: int,
    *,
    algorithm: str = "ppo",
    eval_episodes: int = EVAL_EPISODES,
) -> dict[str, Any]:
    """Train SB3's `algorithm` (ppo or sac) with every default on one env, then evaluate."""
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger

    cpu, wall = time.process_time(), time.perf_counter()
    env = make_vec_env(env_id, n_envs=1, seed=seed)
    model_class = {"ppo": PPO, "sac": SAC}[algorithm]
    model = model_class("MlpPolicy", env, device="cpu", seed=seed, verbose=0)
    # A logger that writes nothing: SB3's own would leave an empty folder in /tmp per run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    env_cpu = step_cpu(env, "step_wait")
    model.learn(total_timesteps=steps)
    cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=eval_episodes, deterministic=True)
    env.close()
    eval_env.close()
    result = row("sb3", env_id, seed, int(model.num_timesteps), float(mean), cpu_s, wall_s)
    return result | {"env_cpu_s": env_cpu[0]}


def row(
    impl: str, env_id: str, seed: Any, steps: int, ret: float, cpu: float, wall: float
) -> dict[str, Any]:
    return {"env": env_id, "impl": impl, "seed": seed, "env_steps": steps, "return": ret,
            "cpu_s": cpu, "wall_s": wall}  # fmt: skip


COLUMNS = [
    ("env", "env", ""),
    ("impl", "impl", ""),
    ("seed", "seed", ""),
    ("env_steps", "env steps", ",d"),
    ("return", "eval return", ".1f"),
    ("cpu_s", "train CPU s", ".1f"),
    ("wall_s", "train wall s", ".1f"),
    ("env_cpu_s", "of it in env steps", ".1f"),
]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    returns, cpu = [r["return"] for r in rows], [r["cpu_s"] for r in rows]
    mean, spread = mean_std(returns)
    return {
        **rows[0],
        "seed": "mean",
        "return": mean,
        "return_std": spread,
        "cpu_s": statistics.fmean(cpu),
        "wall_s": statistics.fmean(r["wall_s"] for r in rows),
        "env_cpu_s": mean_or_none([r.get("env_cpu_s") for r in rows]),
    }


def mean_or_none(values: list[float | None]) -> float | None:
    """The mean, or None where any run has no figure (a native env's steps are untimed)."""
    return None if any(v is None for v in values) else statistics.fmean(values)  # type: ignore[arg-type]


def learner_cpu_ratio(ours: dict[str, Any], sb3: dict[str, Any]) -> str:
    """Train CPU beyond the env's steps, ours / SB3's: the part each learner controls."""
    if ours.get("env_cpu_s") is None or sb3.get("env_cpu_s") is None:
        return ""
    own, theirs = ours["cpu_s"] - ours["env_cpu_s"], sb3["cpu_s"] - sb3["env_cpu_s"]
    return (
        f"; beyond the env's steps ours {own:.1f} s / SB3 {theirs:.1f} s = {own / theirs:.3f} "
        f"(env steps: ours {ours['env_cpu_s']:.1f} s, SB3 {sb3['env_cpu_s']:.1f} s)"
    )


def reaches(curve: list[list[float]], target: float) -> tuple[Any, Any]:
    """The first evaluation point at or above `target`, and the first from which every later
    one stays there (None where none does). A single evaluation can spike: HumanoidStandup's
    deterministic policy returned 107,400 after 20,480 env steps, then 67,098."""
    first = next((p for p in curve if p[1] >= target), None)
    stays = None
    for point in reversed(curve):
        if point[1] < target:
            break
        stays = point
    return first, stays


def cpu_to_match(ours: list[dict[str, Any]], sb3: dict[str, Any]) -> str:
    """When ours reaches SB3's mean return (its evaluation points: first, and for good),
    against SB3's CPU for its whole budget: the comparison at equal return rather than equal
    env steps."""
    target = sb3["return"]
    lines = []
    for kind, index in (("first reaches", 0), ("stays at or above", 1)):
        reached = [reaches(r["curve"], target)[index] for r in ours]
        if any(p is None for p in reached):
            missed = [r["seed"] for r, p in zip(ours, reached, strict=True) if p is None]
            verb = "never reaches" if index == 0 else "ends below"
            lines.append(f"{sb3['env']}: on seeds {missed} ours {verb} SB3's mean return "
                         f"{target:.1f}")  # fmt: skip
            continue
        steps = [p[0] for p in reached if p is not None]
        cpu = statistics.fmean(p[2] for p in reached if p is not None)
        lines.append(
            f"{sb3['env']}: ours {kind} SB3's mean return {target:.1f} from "
            f"{'/'.join(f'{s:,d}' for s in steps)} env steps, mean CPU {cpu:.1f} s: "
            f"{cpu / sb3['cpu_s']:.3f}x SB3's CPU for its {sb3['env_steps']:,d} steps"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=["ppo", "sac"], default="ppo")
    parser.add_argument("--envs", nargs="+", default=DEFAULT_ENVS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300_000, help="Pendulum-v1: 100k")
    parser.add_argument("--impls", nargs="+", choices=["ours", "sb3"], default=["ours", "sb3"])
    parser.add_argument(
        "--curve-every", type=int, default=0,
        help="ours: also evaluate every this many env steps; with SB3 run too, print the "
        "CPU time at which ours first reaches SB3's mean return, and stays at or above it",
    )  # fmt: skip
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument(
        "--sac-path", choices=["default", "one-function-eager"], default="default",
        help="ours, SAC: one-function-eager runs the compiled path's update uncompiled",
    )  # fmt: skip
    parser.add_argument(
        "--trace", type=Path, default=None, metavar="DIR",
        help="ours: write each run's training statistics to DIR/<env>-seed<S>.csv",
    )  # fmt: skip
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", dest="settings",
        help="ours: params keys changed from what env.name alone gives (algorithm.ppo.gamma=0.99)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    settings = parse_settings(args.settings)
    changed = f"; ours with {settings}" if settings else ""
    meta = setup(
        args,
        f"Changing only env.name: family defaults vs SB3 {args.algorithm.upper()} defaults",
        method=f"seeds {args.seeds}, taking turns per seed; means over seeds (--reps unused)"
        + changed,
    )
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for env_id in args.envs:
        steps = DEFAULT_STEPS.get(env_id, args.steps) if args.steps == 300_000 else args.steps
        for seed in args.seeds:
            order = args.impls if seed % 2 == 0 else args.impls[::-1]
            for impl in order:
                if impl == "ours":
                    result = run_ours(
                        env_id, seed, steps, args.curve_every, algorithm=args.algorithm,
                        eval_episodes=args.eval_episodes, settings=settings,
                        trace=trace_path(args.trace, env_id, seed), sac_path=args.sac_path,
                    )  # fmt: skip
                else:
                    result = run_sb3(
                        env_id, seed, steps, algorithm=args.algorithm,
                        eval_episodes=args.eval_episodes,
                    )  # fmt: skip
                runs.setdefault((env_id, impl), []).append(result)
                print_table([result], COLUMNS)
    summary = [summarize(rows) for rows in runs.values()]
    print()
    print_table([r for rows in runs.values() for r in rows], COLUMNS)
    print()
    for env_id in args.envs:
        ours, sb3 = (
            next((s for s in summary if s["env"] == env_id and s["impl"] == impl), None)
            for impl in ("ours", "sb3")
        )
        if ours is not None and sb3 is None:
            print(f"{env_id}: ours {ours['return']:.1f} +- {ours['return_std']:.1f}")
        if ours is None or sb3 is None:
            continue
        print(
            f"{env_id}: ours {ours['return']:.1f} +- {ours['return_std']:.1f}, SB3 "
            f"{sb3['return']:.1f} +- {sb3['return_std']:.1f}; CPU ours / SB3 "
            f"{ours['cpu_s'] / sb3['cpu_s']:.3f}" + learner_cpu_ratio(ours, sb3)
        )
        if args.curve_every > 0:
            print(cpu_to_match(runs[(env_id, "ours")], sb3))
    write_json(args.json, meta, {"runs": [r for rows in runs.values() for r in rows],
                                 "summary": summary})  # fmt: skip


if __name__ == "__main__":
    main()
