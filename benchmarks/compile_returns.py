"""Does the compiled path learn as well as eager? Returns side by side over many seeds.

Run from the repository root (needs `mujoco` for the MuJoCo envs):

    .venv/bin/python -m benchmarks.compile_returns --envs Walker2d-v5 Hopper-v5 --seeds 0-9
    .venv/bin/python -m benchmarks.compile_returns --seeds 0-4 --results A.jsonl   # one worker
    .venv/bin/python -m benchmarks.compile_returns --seeds 5-9 --results B.jsonl   # another
    .venv/bin/python -m benchmarks.compile_returns --summarize A.jsonl B.jsonl

What a params.yaml holding only `env.name` trains (300k env steps by default), in three modes
that differ in one thing each:

- `eager`: the eager update, Gymnasium's default next-step reset (a masked step per episode);
- `same-step`: the eager update, `env.options.autoreset: same-step` (every step a transition);
- `compiled`: the compiled whole step (`runtime.compile`), the env as in `eager`.

`eager` vs `compiled` isolates the compiler (the same update to float rounding, by
construction and test, so the question is whether rounding's drift costs return), `eager`
vs `same-step` the reset (GRPO's and the offline collector's envs). Each run is
evaluated on `--eval-episodes` deterministic episodes of seeds training never used. A run is
one line of the results file (JSON), written when it ends, so an interrupted benchmark
resumes where it stopped. The summary prints per env and mode the mean, std and median over
seeds, the mean training CPU seconds, and Welch's t of each mode against `eager`.

`--same-state-update K` instead trains eager for K updates and runs the next update both
eagerly and as the compiled whole step from the same state: the relative difference of the
two parameter changes (float rounding: ~1e-6).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.env_defaults import evaluation_cpu
from pipelines.params import parse_params
from rlcore.config import ExperimentConfig
from rlcore.trainer import Trainer

MODES = ("eager", "same-step", "compiled")
# Summaries also name SAC probes' `--sac-path one-function-eager` runs (`benchmarks.env_defaults`):
# the compiled path's update run uncompiled.
SUMMARY_MODES = (*MODES, "one-function-eager")
DEFAULT_ENVS = ["Walker2d-v5", "Hopper-v5"]
DEFAULT_RESULTS = Path("benchmarks/results/compile_returns.jsonl")


def experiment(env_id: str, steps: int, mode: str) -> ExperimentConfig:
    """Only `env.name` (and, for `same-step`, the reset option) set, as a user's file would."""
    env: dict[str, Any] = {"name": f"gymnasium:{env_id}"}
    if mode == "same-step":
        env["options"] = {"autoreset": "same-step"}
    return parse_params({"env": env, "trainer": {"total_env_steps": steps}}).experiment(seed=0)


def run(env_id: str, seed: int, mode: str, steps: int, eval_episodes: int) -> dict[str, Any]:
    """Train one seed in one mode to `steps`, then evaluate; training CPU s excludes evaluation."""
    cfg = experiment(env_id, steps, mode)
    trainer_cfg = dataclasses.replace(
        cfg.trainer, seed=seed, eval_every_iters=0, eval_episodes=eval_episodes,
        stop_at_eval_return=None, stop_at_eval_success=None,
    )  # fmt: skip
    cpu = time.process_time()
    trainer = Trainer(
        dataclasses.replace(cfg, trainer=trainer_cfg), compile_loss=mode == "compiled"
    )
    eval_s = evaluation_cpu(trainer)
    result = trainer.run()
    cpu_s = time.process_time() - cpu - eval_s[0]
    trainer.env.close()
    if trainer.eval_env is not None:
        trainer.eval_env.close()
    return {
        "env": env_id, "seed": seed, "mode": mode, "env_steps": result.env_steps,
        "return": result.eval_metrics["eval/episode_return"], "cpu_s": round(cpu_s, 1),
    }  # fmt: skip


def same_state_update(env_id: str, updates: int, steps: int = 300_000) -> dict[str, float]:
    """Train eager for `updates` updates, collect one more rollout, then run the next update
    both ways from that same state (policy, Adam, rollout, random stream): how far apart
    the two parameter changes are, relative to the change itself. Where returns differ
    between the modes, this says whether the update mid-run is still the same update."""
    import copy

    import torch

    from rlcore.algos.ppo import PPO

    cfg = experiment(env_id, steps, "eager")
    trainer_cfg = dataclasses.replace(cfg.trainer, eval_every_iters=0, seed=0)
    trainer = Trainer(dataclasses.replace(cfg, trainer=trainer_cfg))
    for _ in range(updates):
        trainer._train_iteration()
    trainer.collector.collect()
    eager = trainer.algo
    assert isinstance(eager, PPO)
    policy, rollout = copy.deepcopy(trainer.policy), trainer.rollout.clone()
    generator = torch.Generator().set_state(trainer.generator.get_state())
    whole = PPO(policy, eager.cfg, eager.optimizer.total_updates, generator, whole_step=True)
    whole.load_state_dict(copy.deepcopy(eager.state_dict()))

    def flat(module: torch.nn.Module) -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in module.parameters()])

    before = flat(trainer.policy)
    eager.update(trainer.rollout)
    whole.update(rollout)
    delta_eager, delta_whole = flat(trainer.policy) - before, flat(policy) - before
    trainer.env.close()
    return {
        "update": updates,
        "change_norm": float(delta_eager.norm()),
        "relative_difference": float((delta_whole - delta_eager).norm() / delta_eager.norm()),
    }


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The runs in `paths`: this benchmark's results files (one JSON line a run), or
    `benchmarks.env_defaults --json` files (ours' runs, each one's mode read from its
    `compiled`, or its `sac_path` where it names one), so that probes of other algorithms
    (SAC) summarize the same way."""
    rows = []
    for path in paths:
        if not path.exists():
            continue
        text = path.read_text()
        try:
            whole = json.loads(text)
        except ValueError:  # several lines: this benchmark's own results
            whole = None
        if isinstance(whole, dict) and "runs" in whole:
            rows += [run | {"mode": probe_mode(run)}
                     for run in whole["runs"] if run.get("impl") == "ours"]  # fmt: skip
        else:
            rows += [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows


def probe_mode(run: dict[str, Any]) -> str:
    """The mode of one `benchmarks.env_defaults` run of ours."""
    if run.get("sac_path", "default") != "default":
        return str(run["sac_path"])
    return "compiled" if run.get("compiled") else "eager"


def welch_t(a: list[float], b: list[float]) -> float:
    """Welch's t of mean(a) - mean(b); nan with fewer than two values a side."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return (statistics.mean(a) - statistics.mean(b)) / se if se > 0 else math.nan


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """One line per (env, mode): seeds, mean ± std, median, CPU s, t against eager."""
    lines = ["| env | mode | seeds | return mean ± std | median | train CPU s | t vs eager |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for env_id in sorted({r["env"] for r in rows}):
        returns = {m: [r["return"] for r in rows if r["env"] == env_id and r["mode"] == m]
                   for m in SUMMARY_MODES}  # fmt: skip
        for mode in SUMMARY_MODES:
            got = returns[mode]
            if not got:
                continue
            cpu = [r["cpu_s"] for r in rows if r["env"] == env_id and r["mode"] == mode]
            std = statistics.stdev(got) if len(got) > 1 else 0.0
            t = "" if mode == "eager" else f"{welch_t(got, returns['eager']):+.2f}"
            lines.append(
                f"| {env_id} | {mode} | {len(got)} | {statistics.mean(got):,.0f} ± {std:,.0f} "
                f"| {statistics.median(got):,.0f} | {statistics.mean(cpu):,.0f} | {t} |"
            )
    return lines


def seed_range(text: str) -> list[int]:
    """`0-9` or `3`: the seeds it names."""
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="+", default=DEFAULT_ENVS)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--seeds", type=seed_range, default=seed_range("0-9"))
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--summarize", type=Path, nargs="+", default=None,
                        help="print the table of these results files and stop")  # fmt: skip
    parser.add_argument("--same-state-update", type=int, metavar="K", default=None,
                        help="compare one update from the state after K eager updates, "
                        "on each env, and stop")  # fmt: skip
    args = parser.parse_args(argv)
    if args.same_state_update is not None:
        for env_id in args.envs:
            print(env_id, json.dumps(same_state_update(env_id, args.same_state_update)))
        return
    if args.summarize:
        print("\n".join(summarize(load(args.summarize))))
        return
    import torch

    torch.set_num_threads(args.threads)
    done = {(r["env"], r["seed"], r["mode"]) for r in load([args.results])}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    # Seeds outermost, modes innermost: a benchmark stopped early still compares like with like.
    for seed in args.seeds:
        for env_id in args.envs:
            for mode in args.modes:
                if (env_id, seed, mode) in done:
                    continue
                row = run(env_id, seed, mode, args.steps, args.eval_episodes)
                print(json.dumps(row), flush=True)
                with args.results.open("a") as out:
                    out.write(json.dumps(row) + "\n")
    print("\n".join(summarize(load([args.results]))))


if __name__ == "__main__":
    main()
