"""Data-parallel PPO with torch.distributed (gloo on CPU): 1 vs K processes, same total batch.

Run from the repository root:

    .venv/bin/python -m benchmarks.distributed --seeds 0 1 2 --processes 1 2

For every seed, runs the default experiment (params.yaml: PPO, 64 envs x 64 steps per
iteration; on the builtin PushCube since 2026-11-23, CartPole before) once per process
count K, one after the other, each launched with `torchrun --standalone --nproc_per_node=K`:
every rank runs 64 / K envs, so all runs collect and learn from the same 4,096 env steps
per iteration and the same minibatch sizes; only the work is split. Reports, per K:

- training steps per second (median over iterations of one iteration's env steps, summed
  over ranks, over its collect + update time; evaluation excluded), the collect and update
  times, and the wall time of the whole run;
- the learning curve: deterministic evaluation return (16 episodes, rank 0) against env
  steps, per seed and averaged; the env steps at which it first reached 475, and from which
  on every evaluation stayed at 475 or more.

Then, for the throughput at larger batches (`--sps-envs`, default 64 256 1024 envs summed
over ranks), short runs of `--sps-iters` iterations per K, alternating, `--reps` times; the
median SPS is reported. With few envs per process, each rank's work is dominated by fixed
per-step costs and the all-reduce (about 1 ms per call for gloo on this VM, 22 calls per
iteration), so splitting pays only from a few hundred envs on.

Target (issue 9): the K-process curve matches the single-process one at the same total batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, print_table, setup, write_json

SOLVED = 475.0


def worker(args: argparse.Namespace) -> None:
    """One rank of one run (started by torchrun); rank 0 writes the figures to `--out`."""
    from pipelines.params import load_params
    from rlcore.distributed import process_group_from_env
    from rlcore.runtime import configure_cpu
    from rlcore.trainer import Trainer

    configure_cpu(args.threads)
    cfg = load_params(Path("params.yaml")).experiment(seed=args.seed)
    with process_group_from_env(cfg.env.device) as dist:
        if args.total_envs % dist.world_size:
            raise SystemExit(f"--total-envs {args.total_envs} is not a multiple of the ranks")
        cfg = dataclasses.replace(
            cfg,
            env=dataclasses.replace(cfg.env, num_envs=args.total_envs // dist.world_size),
            trainer=dataclasses.replace(
                cfg.trainer,
                total_env_steps=args.total_steps,
                eval_every_iters=args.eval_every,
                stop_at_eval_return=None,
            ),
        )
        iterations: list[dict[str, float]] = []
        curve: list[dict[str, float]] = []
        start = time.perf_counter()

        def sink(env_steps: int, metrics: dict[str, float]) -> None:
            if "eval/episode_return" in metrics:
                point = {"env_steps": env_steps, "eval_return": metrics["eval/episode_return"]}
                curve.append(point)
            else:
                iterations.append(
                    {k: metrics[k] for k in ("time/sps", "time/collect_s", "time/update_s")}
                )

        trainer = Trainer(cfg, sink=sink, dist=dist)
        trainer.run()
        wall_s = time.perf_counter() - start
        if dist.is_main:
            result = {
                "processes": dist.world_size,
                "envs_per_process": cfg.env.num_envs,
                "env_steps": trainer.env_steps,
                "wall_s": wall_s,
                "iterations": iterations,
                "curve": curve,
            }
            Path(args.out).write_text(json.dumps(result))


def launch(processes: int, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={processes}", "-m", "benchmarks.distributed", "--worker",
        "--seed", str(seed), "--threads", str(args.threads), "--out", str(out),
        "--total-envs", str(args.total_envs), "--total-steps", str(args.total_steps),
        "--eval-every", str(args.eval_every),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{processes} processes, seed {seed} failed:\n{done.stdout}{done.stderr}")
    return json.loads(out.read_text())


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    steps = run["iterations"][1:]  # the first iteration warms up
    curve = run["curve"]
    solved = next((p["env_steps"] for p in curve if p["eval_return"] >= SOLVED), None)
    # From which evaluation on every later one stayed solved.
    stable = next(
        (p["env_steps"] for i, p in enumerate(curve)
         if all(q["eval_return"] >= SOLVED for q in curve[i:])),
        None,
    )  # fmt: skip
    return {
        "sps": statistics.median(i["time/sps"] for i in steps),
        "collect_ms": 1000 * statistics.median(i["time/collect_s"] for i in steps),
        "update_ms": 1000 * statistics.median(i["time/update_s"] for i in steps),
        "wall_s": run["wall_s"],
        "final_return": run["curve"][-1]["eval_return"],
        "solved_at": solved,
        "stable_at": stable,
    }


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.set_defaults(reps=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--total-envs", type=int, default=64, help="envs summed over ranks")
    parser.add_argument("--total-steps", type=int, default=500_000)
    parser.add_argument("--eval-every", type=int, default=6, help="iterations between evals")
    parser.add_argument("--sps-envs", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--sps-iters", type=int, default=12)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    meta = setup(
        args,
        "distributed: PPO CartPole, 1 vs K gloo processes at the same total batch",
        f"{args.total_envs} envs x 64 steps per iteration summed over ranks, "
        f"{args.total_steps:,d} env steps, seeds {args.seeds}; torch threads per process "
        f"{args.threads}; SPS: median over iterations (evaluation excluded)",
    )
    runs: dict[int, dict[int, dict[str, Any]]] = {k: {} for k in args.processes}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for k in args.processes:  # alternating: both counts see the same background load
                run = launch(k, seed, args, Path(tmp) / f"k{k}_s{seed}.json")
                runs[k][seed] = run
                s = summarise(run)
                print(
                    f"  seed {seed}, {k} process(es): {s['sps']:,.0f} steps/s, final return "
                    f"{s['final_return']:.1f}, solved at {s['solved_at']}",
                    flush=True,
                )
    rows = []
    for k, by_seed in runs.items():
        per_seed = [summarise(run) for run in by_seed.values()]
        solved = [s["solved_at"] for s in per_seed if s["solved_at"] is not None]
        stable = [s["stable_at"] for s in per_seed if s["stable_at"] is not None]
        rows.append(
            {
                "processes": k,
                "sps": statistics.median(s["sps"] for s in per_seed),
                "collect_ms": statistics.median(s["collect_ms"] for s in per_seed),
                "update_ms": statistics.median(s["update_ms"] for s in per_seed),
                "wall_s": statistics.median(s["wall_s"] for s in per_seed),
                "final_return": statistics.mean(s["final_return"] for s in per_seed),
                "solved_at": statistics.median(solved) if solved else None,
                "solved_seeds": f"{len(solved)}/{len(per_seed)}",
                "stable_at": statistics.median(stable) if stable else None,
                "stable_seeds": f"{len(stable)}/{len(per_seed)}",
            }
        )
    base = rows[0]["sps"]
    for row in rows:
        row["speedup"] = row["sps"] / base
    print()
    print_table(
        rows,
        [
            ("processes", "processes", "d"),
            ("sps", "train SPS", ",.0f"),
            ("speedup", "vs first", ".2f"),
            ("collect_ms", "collect ms", ".1f"),
            ("update_ms", "update ms", ".1f"),
            ("wall_s", "wall s", ".1f"),
            ("final_return", "final return", ".1f"),
            ("solved_at", "median steps to 475", ",.0f"),
            ("solved_seeds", "seeds solved", ""),
            ("stable_at", "median steps to stay >= 475", ",.0f"),
            ("stable_seeds", "seeds", ""),
        ],
    )
    # The learning curves side by side: mean over seeds at every evaluation.
    print()
    curve_rows = []
    first = runs[args.processes[0]]
    for i, point in enumerate(next(iter(first.values()))["curve"]):
        row: dict[str, Any] = {"env_steps": point["env_steps"]}
        for k, by_seed in runs.items():
            returns = [run["curve"][i]["eval_return"] for run in by_seed.values()]
            row[f"k{k}"] = statistics.mean(returns)
            row[f"k{k}_seeds"] = " ".join(f"{r:.0f}" for r in returns)
        curve_rows.append(row)
    columns = [("env_steps", "env steps", ",d")]
    for k in runs:
        columns += [(f"k{k}", f"{k} proc mean", ".1f"), (f"k{k}_seeds", "per seed", "")]
    print_table(curve_rows, columns)
    throughput = measure_throughput(args)
    write_json(
        args.json,
        meta,
        {"summary": rows, "curve": curve_rows, "throughput": throughput, "runs": runs},
    )


def measure_throughput(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Median training SPS per total env count and process count (short runs, no evals)."""
    samples: dict[tuple[int, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for envs in args.sps_envs:
                for k in args.processes:
                    short = argparse.Namespace(
                        **{
                            **vars(args),
                            "total_envs": envs,
                            "total_steps": envs * 64 * args.sps_iters,
                            "eval_every": 0,
                        }
                    )
                    run = launch(k, rep, short, Path(tmp) / f"t{envs}_k{k}.json")
                    samples.setdefault((envs, k), []).append(summarise(run)["sps"])
    rows = []
    for envs in args.sps_envs:
        base = statistics.median(samples[(envs, args.processes[0])])
        for k in args.processes:
            sps = statistics.median(samples[(envs, k)])
            rows.append(
                {"total_envs": envs, "processes": k, "sps": sps, "speedup": sps / base,
                 "samples": " ".join(f"{x:,.0f}" for x in samples[(envs, k)])}
            )  # fmt: skip
    print()
    print(f"throughput: {args.sps_iters} iterations per run, median of {args.reps} runs")
    print_table(
        rows,
        [
            ("total_envs", "envs (all ranks)", "d"),
            ("processes", "processes", "d"),
            ("sps", "train SPS", ",.0f"),
            ("speedup", f"vs {args.processes[0]} proc", ".2f"),
            ("samples", "runs", ""),
        ],
    )
    return rows


if __name__ == "__main__":
    main()
