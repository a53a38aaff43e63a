"""Every figure that issue P19's targets name, in one run: on a GPU, or the CPU mode.

Run from the repository root:

    .venv/bin/python -m benchmarks.fast_path                 # CUDA where torch sees one, else CPU
    .venv/bin/python -m benchmarks.fast_path --device cpu    # the CPU mode
    .venv/bin/python -m benchmarks.fast_path --sections step sac --json out.json

Sections (`--sections`, default all), each the benchmark named, with the sizes of the mode:

- `sps` (`benchmarks.throughput`): env-only, +policy (`bare`: act + env step into the
  rollout) and +train steps per second at every N of `--sizes` for the builtin tasks, and
  MuJoCo Warp HalfCheetah where `mujoco_warp` is installed and the device is CUDA; the train
  part eager, then with `runtime.compile`; the collector's share of the ideal (on CUDA also
  with its steps one CUDA graph, `rlcore.collection_graph`, as `runtime.compile` runs it);
  the act step and the collector with the networks compiled (`rlcore.compiled_act`);
- `step` (`benchmarks.fused_step`): one PPO minibatch step eager, loss compiled, whole step
  compiled and (CUDA) graphed;
- `sac` (`benchmarks.sac_update`): one SAC update of the HalfCheetah preset's networks
  (400x300, batch 256 on CPU), eager and compiled;
- `presets` (`benchmarks.cuda_presets`): each GPU preset to its target on the device, eager,
  then compiled twice in this process (the first run compiles; the second reads the
  compiled code), with its return (or success) against wall time at every evaluation;
  `cuda_halfcheetah` only on CUDA with `mujoco_warp` installed.

Then one table of the targets: the figure, its value, the target and met / MISSED ("-" where
this run did not measure it, with the command that does). The CPU mode's sizes are what a CPU
runs in minutes; its GPU lines stay "-". Compiling needs a C++ compiler (CPU) or Triton
(CUDA); without one the compiled parts say so and the rest runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import cuda_presets, fused_step, sac_update, throughput
from benchmarks.common import base_parser, device_arg, print_table, setup, verdict, write_json
from rlcore.algos.compile import check_compile_available
from rlcore.presets_cuda import CUDA_PRESETS

SECTIONS = ("sps", "step", "sac", "presets")
TARGET_N = 65_536


@dataclasses.dataclass(frozen=True)
class Mode:
    """What one device's run measures: sizes a GPU fills, or a CPU finishes in minutes."""

    sizes: tuple[int, ...]
    rows: tuple[int, ...]  # PPO minibatch sizes
    sac_batch: int


MODES = {
    "cuda": Mode(sizes=(4096, 16_384, TARGET_N), rows=(4096, 32_768), sac_batch=4096),
    "cpu": Mode(sizes=(64, 1024), rows=(64, 512), sac_batch=256),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """One line of the issue's targets and where its figure comes from."""

    device: str  # "cuda" or "cpu": the mode that measures it
    figure: str
    bound: float
    higher_is_better: bool
    value: Callable[[dict[str, Any]], float | None]
    command: str  # what measures it where this run did not


def _sps_ratio(results: dict[str, Any], env: str, key: str) -> float | None:
    row = next((r for r in results.get("sps", []) if r["env"] == env and r["N"] == TARGET_N), None)
    return None if row is None else row.get(key)


def _collector_ratio(results: dict[str, Any]) -> float | None:
    """`runtime.compile`'s collector against the ideal: its steps one CUDA graph where the
    run measured that (`collector_graphed`), else the eager collector."""
    graphed = _sps_ratio(results, "cartpole", "collector_graphed_ratio")
    return graphed if graphed is not None else _sps_ratio(results, "cartpole", "collector_ratio")


def _worst_step_ms(results: dict[str, Any]) -> float | None:
    graphed = [r["ms"] for r in results.get("step", []) if r["variant"] == "graph"]
    return max(graphed) if graphed else None


def _step_ratio(results: dict[str, Any]) -> float | None:
    """The compiled whole step / eager of the 64x64 network (cartpole's) at its smallest
    minibatch: the issue's CPU line."""
    rows = [
        r for r in results.get("step", []) if r["task"] == "cartpole" and r["variant"] == "step"
    ]
    return min(rows, key=lambda r: r["rows"])["vs_eager"] if rows else None


def _sac_ratio(results: dict[str, Any]) -> float | None:
    rows = [
        r for r in results.get("sac", [])
        if r["compiled"] and r.get("precision", "float32") == "float32"
    ]  # fmt: skip
    return rows[0]["compiled_vs_eager"] if rows else None


def _sac_bf16_ratio(results: dict[str, Any]) -> float | None:
    """The compiled update with bf16 products (`sac.precision`, the preset's `auto` on a
    device with native bf16) against the float32 eager update."""
    ms = {(r.get("precision"), r["compiled"]): r["update_ms"] for r in results.get("sac", [])}
    bf16, eager = ms.get(("bfloat16", True)), ms.get(("float32", False))
    return bf16 / eager if bf16 is not None and eager else None


def _time_to_target(results: dict[str, Any], task: str) -> float | None:
    """The fastest wall time (evaluation excluded) of `task`'s runs that reached the target."""
    times = [
        r["wall_ex_eval_s"]
        for r in results.get("presets", [])
        if r["task"] == task and r["reached"]
    ]
    return min(times) if times else None


TARGETS = (
    Target("cuda", "+train / env-only SPS, cartpole, N = 65,536 (compiled)", 0.5, True,
           lambda r: _sps_ratio(r, "cartpole", "train_over_env_compiled"),
           "benchmarks.fast_path on a GPU"),
    Target("cuda", "+train / env-only SPS, Warp HalfCheetah, N = 65,536 (compiled)", 0.8, True,
           lambda r: _sps_ratio(r, "mujoco_halfcheetah", "train_over_env_compiled"),
           "benchmarks.fast_path on a GPU with mujoco_warp installed"),
    Target("cuda", "collector / ideal SPS, cartpole, N = 65,536 (graphed where measured)",
           0.95, True, _collector_ratio, "benchmarks.fast_path on a GPU"),
    Target("cuda", "PPO minibatch step, graphed, slowest measured (ms)", 1.0, False,
           _worst_step_ms, "benchmarks.fast_path on a GPU"),
    Target("cuda", "push_cube success >= 0.9: wall s (evaluation excluded)", 10.0, False,
           lambda r: _time_to_target(r, "cuda_push_cube"), "benchmarks.fast_path on a GPU"),
    Target("cuda", "Warp HalfCheetah return >= 5,000: wall s", 300.0, False,
           lambda r: _time_to_target(r, "cuda_halfcheetah"),
           "benchmarks.fast_path on a GPU with mujoco_warp installed"),
    Target("cpu", "PPO minibatch step, 64x64 MLP: compiled / eager", 0.4, False, _step_ratio,
           "benchmarks.fast_path --device cpu --sections step"),
    Target("cpu", "SAC update (HalfCheetah's networks): compiled / eager", 0.4, False, _sac_ratio,
           "benchmarks.fast_path --device cpu --sections sac"),
    Target("cpu", "SAC update, bf16 products: compiled bf16 / float32 eager", 0.4, False,
           _sac_bf16_ratio, "benchmarks.fast_path --device cpu --sections sac"),
    Target("cpu", "native HalfCheetah PPO to 1M: wall compiled / eager", 0.6, False,
           lambda r: None,
           "benchmarks.locomotion --task halfcheetah --backends native native-compiled "
           "--seeds 0 1 2 (~40 min)"),
    Target("cpu", "the same, bf16 products: wall compiled bf16 / float32 eager", 0.6, False,
           lambda r: None,
           "benchmarks.locomotion --task halfcheetah --backends native native-compiled-bf16 "
           "--seeds 0 1 2 (~30 min; returns over ten seeds: benchmarks/README.md)"),
)  # fmt: skip


def check_targets(results: dict[str, Any], device_type: str) -> list[dict[str, Any]]:
    """The targets table: each line's value from `results` where this mode measures it."""
    rows = []
    for target in TARGETS:
        value = target.value(results) if target.device == device_type else None
        sign = ">=" if target.higher_is_better else "<="
        rows.append(
            {
                "figure": target.figure,
                "value": value,
                "target": f"{sign} {target.bound:g}",
                "verdict": verdict(value, target.bound, target.higher_is_better),
                "measured by": "this run" if value is not None else target.command,
            }
        )
    return rows


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def merge_sps(eager: list[dict], compiled: list[dict]) -> list[dict[str, Any]]:
    """throughput's eager rows with the compiled train figures, and +train / env-only."""
    by_key = {(r["env"], r["N"]): r for r in compiled}
    rows = []
    for row in eager:
        row = dict(row)
        other = by_key.get((row["env"], row["N"]), {})
        if "train_sps" in other:
            row["train_sps_compiled"] = other["train_sps"]
        for key, suffix in (("train_sps", ""), ("train_sps_compiled", "_compiled")):
            if row.get(key) and row.get("env_sps"):
                row[f"train_over_env{suffix}"] = row[key] / row["env_sps"]
        rows.append(row)
    return rows


def sps_envs(device: torch.device) -> list[str]:
    """The builtin tasks, and Warp HalfCheetah where it can run (CUDA with mujoco_warp)."""
    envs = ["cartpole", "push_cube"]
    if device.type == "cuda" and importlib.util.find_spec("mujoco_warp") is not None:
        envs.append("mujoco_halfcheetah")
    return envs


def run_sps(args: argparse.Namespace, mode: Mode, scratch: Path, compiles: bool) -> list[dict]:
    envs = sps_envs(torch.device(args.device))
    common = ["--device", args.device, "--reps", str(args.reps), "--envs", *envs]
    common += ["--sizes", *map(str, mode.sizes)]
    eager_json, compiled_json = scratch / "sps.json", scratch / "sps_compiled.json"
    parts = ["env", "act", "collector", "bare", "train"]
    parts += ["act_compiled", "collector_compiled"] if compiles else []
    parts += ["collector_graphed"] if compiles and args.device.startswith("cuda") else []
    throughput.main([*common, "--parts", *parts, "--json", str(eager_json)])
    compiled: list[dict] = []
    if compiles:
        throughput.main([*common, "--parts", "train", "--compile", "--json", str(compiled_json)])
        compiled = _read(compiled_json)["rows"]
    rows = merge_sps(_read(eager_json)["rows"], compiled)
    print()
    print_table(
        rows,
        [
            ("env", "env", ""),
            ("N", "N", "d"),
            ("env_sps", "env SPS", ",.0f"),
            ("bare_sps", "+policy SPS", ",.0f"),
            ("train_sps", "+train SPS eager", ",.0f"),
            ("train_sps_compiled", "+train SPS compiled", ",.0f"),
            ("train_over_env", "+train / env eager", ".3f"),
            ("train_over_env_compiled", "+train / env compiled", ".3f"),
            ("collector_ratio", "collector / ideal", ".3f"),
            ("collector_graphed_ratio", "collector graphed / ideal", ".3f"),
            ("graphed_over_eager", "collector graphed / eager", ".2f"),
            ("act_compiled_ratio", "act compiled / eager", ".2f"),
            ("collector_compiled_ratio", "collector compiled / eager", ".2f"),
        ],
    )
    return rows


def run_step(args: argparse.Namespace, mode: Mode, scratch: Path) -> list[dict]:
    out = scratch / "step.json"
    fused_step.main(["--device", args.device, "--reps", str(args.reps), "--steps", "20",
                     "--rows", *map(str, mode.rows), "--json", str(out)])  # fmt: skip
    return _read(out)["results"]


def run_sac(args: argparse.Namespace, mode: Mode, scratch: Path) -> list[dict]:
    out = scratch / "sac.json"
    sac_update.main(["--device", args.device, "--reps", str(max(args.reps, 5)),
                     "--hidden", "400x300", "--batch", str(mode.sac_batch),
                     "--precisions", "float32", "bfloat16", "--compile",
                     "--json", str(out)])  # fmt: skip
    return _read(out)["rows"]


def run_presets(args: argparse.Namespace, compiles: bool) -> list[dict]:
    """Each GPU preset to its target: eager, then compiled twice (compiling, then warm)."""
    rows = []
    runs = [("eager", False)] + (
        [("compiled, first", True), ("compiled, next", True)] if compiles else []
    )
    for task in cuda_presets.default_tasks(args.device):
        preset = CUDA_PRESETS[task]
        cfg = dataclasses.replace(preset, env=dataclasses.replace(preset.env, device=args.device))
        for label, compiled in runs:
            row = cuda_presets.run(task, label, cfg, args.seed, compiled)
            rows.append(row)
            score = "success" if task == "cuda_push_cube" else "return"
            points = ", ".join(
                f"{wall:.1f} s: {succ if score == 'success' else ret:.2f}"
                for wall, _, ret, succ in row["curve"]
            )
            took = f"{row['wall_ex_eval_s']:.1f} s to target ({row['iterations']} iterations)"
            print(f"{task} [{label}]: {took}; {score} by wall s: {points}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--seed", type=int, default=0, help="the presets' training seed")
    parser.add_argument("--no-compile", action="store_true", help="eager parts only")
    parser.add_argument("--sizes", nargs="+", type=int, help="sps: the Ns (default: the mode's)")
    args = parser.parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device = device_arg(args.device)
    kind = "cuda" if device.type == "cuda" else "cpu"
    mode = MODES[kind]
    if args.sizes:
        mode = dataclasses.replace(mode, sizes=tuple(args.sizes))
    meta = setup(args, f"The fast path's targets (issue P19) on {args.device}")
    if kind == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
        print(f"GPU {meta['gpu']}")
    compiles = not args.no_compile
    if compiles:
        try:
            check_compile_available(device)
        except Exception as exc:  # the line that says what is missing; eager parts still run
            print(f"compiled parts skipped: {exc}")
            compiles = False
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        if "sps" in args.sections:
            results["sps"] = run_sps(args, mode, scratch, compiles)
        if "step" in args.sections and compiles:
            results["step"] = run_step(args, mode, scratch)
        if "sac" in args.sections and compiles:
            results["sac"] = run_sac(args, mode, scratch)
        if "presets" in args.sections:
            results["presets"] = run_presets(args, compiles)
    checks = check_targets(results, kind)
    print(f"\ntargets (issue P19), {args.device}:")
    print_table(
        checks,
        [
            ("figure", "figure", ""),
            ("value", "value", ".3f"),
            ("target", "target", ""),
            ("verdict", "verdict", ""),
            ("measured by", "measured by", ""),
        ],
    )
    write_json(args.json, meta, results | {"targets": checks})


if __name__ == "__main__":
    main()
