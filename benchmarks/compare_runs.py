"""Wall time of `python -m pipelines compare` over many DVC experiments (training excluded).

Run from the repository root (needs git):

    .venv/bin/python -m benchmarks.compare_runs                     # 10 experiments x 3 seeds
    .venv/bin/python -m benchmarks.compare_runs --experiments 20 --seeds 5 --reps 5

Builds a throwaway git + DVC project whose one stage writes, for every seed of `seeds`, the
files the real `train` and `evaluate` stages write (train.json, eval.json, a 60-point
curve.csv), plus a small video as a DVC-cached output. Each of the N experiments is a real
`dvc exp run -n exp-K -S algorithm.ppo.lr=...` (setup, not timed). Then it times the
comparison of the baseline and all N experiments as a user runs it, a fresh
`python -m pipelines compare` process (interpreter start, imports, DVC's experiment list,
git reads, figures, both pages), `--reps` times; the median is the figure. Target: 10 x 3
in <= 30 s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

import yaml

from benchmarks.common import print_table, scratch_env, verdict, write_json
from benchmarks.common import run_timed as run

TARGET_S = 30.0
REPO = Path(__file__).resolve().parents[1]
# Writes what train@S and evaluate@S would, with numbers that depend on lr and the seed.
FAKE_STAGE = textwrap.dedent("""
    import json, math, os, yaml
    params = yaml.safe_load(open("params.yaml"))
    lr = params["algorithm"]["ppo"]["lr"]
    for seed in params["seeds"]:
        d = f"metrics/seeds/{seed}"
        os.makedirs(d, exist_ok=True)
        final = 500 * (1 - math.exp(-lr * 2000)) - 3 * seed
        rows = ["env_steps,wall_s,eval_return,eval_return_min,eval_success_rate,train_return"]
        for i in range(1, 61):
            ret = final * (1 - math.exp(-i / (8 + seed)))
            rows.append(f"{i * 16384},{i * 0.35:.3f},{ret:.2f},{ret - 20:.2f},,{ret - 5:.2f}")
        open(f"{d}/curve.csv", "w").write("\\n".join(rows) + "\\n")
        json.dump({"env_steps": 983040, "wall_s": 21.0 + seed, "train_sps": 46800.0,
                   "iterations": 240, "reached_target": 0, "eval_return": final},
                  open(f"{d}/train.json", "w"))
        json.dump({"episodes": 64, "return_mean": final, "return_std": 1.0,
                   "return_min": final - 2, "return_max": final + 2, "length_mean": final,
                   "wall_s": 0.1}, open(f"{d}/eval.json", "w"))
    os.makedirs("outputs/video", exist_ok=True)
    open("outputs/video/episodes.mp4", "wb").write(os.urandom(200_000))
""")
DVC_YAML = """
stages:
  fake:
    cmd: python fake_stage.py
    deps: [fake_stage.py]
    params: [seeds, algorithm]
    outs:
      - outputs/video/episodes.mp4
      - metrics/seeds:
          cache: false
"""


def build_project(root: Path, experiments: int, seeds: int, env: dict[str, str]) -> None:
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    defaults["seeds"] = list(range(seeds))
    (root / "params.yaml").write_text(yaml.safe_dump(defaults))
    (root / "fake_stage.py").write_text(FAKE_STAGE)
    (root / "dvc.yaml").write_text(DVC_YAML)
    dvc = [sys.executable, "-m", "dvc"]
    for args in (
        ["git", "init", "-q"],
        [*dvc, "init", "-q"],
        [*dvc, "repro", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "baseline"],
    ):
        run(args, root, env)
    for k in range(experiments):
        lr = 1e-4 * (k + 1)
        print(f"... dvc exp run {k + 1}/{experiments} (setup)", flush=True)
        run(
            [*dvc, "exp", "run", "-q", "-n", f"exp-{k}", "-S", f"++algorithm.ppo.lr={lr:g}"],
            root,
            env,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3, help="timed compares; median reported")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        raise SystemExit("git is needed (the experiments live in a temporary git repo)")
    env = scratch_env(PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory(prefix="compare-runs-") as tmp:
        root = Path(tmp)
        build_project(root, args.experiments, args.seeds, env)
        walls = []
        for rep in range(args.reps):
            walls.append(run([sys.executable, "-m", "pipelines", "compare"], root, env))
            print(f"... compare {rep + 1}/{args.reps}: {walls[-1]:.2f} s", flush=True)
        page = (root / "reports" / "compare.md").read_text()
        listed = sum(1 for line in page.splitlines() if line.startswith("| exp-"))
        media = len(list((root / "reports" / "compare" / "media").glob("*.mp4")))
    median = statistics.median(walls)
    print()
    row = {
        "runs": f"baseline + {args.experiments} experiments",
        "seeds": args.seeds,
        "listed": listed,
        "videos": media,
        "median_s": median,
        "min_s": min(walls),
    }
    print_table(
        [row],
        [("runs", "runs", ""), ("seeds", "seeds each", "d"), ("listed", "experiments listed", "d"),
         ("videos", "videos linked", "d"), ("median_s", "compare s (median)", ".2f"),
         ("min_s", "min s", ".2f")],
    )  # fmt: skip
    print()
    if listed != args.experiments:
        raise SystemExit(f"the page lists {listed} experiments, expected {args.experiments}")
    print(
        f"compare wall seconds: {median:.2f} (target <= {TARGET_S}): "
        f"{verdict(median, TARGET_S, False)}"
    )
    write_json(
        args.json, {"benchmark": "compare_runs", "reps": args.reps}, {"row": row, "walls": walls}
    )


if __name__ == "__main__":
    main()
