"""Wall time of `dvc repro` of the default experiment, and the share that is orchestration.

Run from the repository root (needs git):

    .venv/bin/python -m benchmarks.pipeline_overhead            # the default experiment
    .venv/bin/python -m benchmarks.pipeline_overhead --reps 3

Each repetition copies the committed project (`git archive HEAD`, plus this working tree's
params.yaml) into a fresh temporary git repo, so the results in this checkout are never
touched, and times there:

- `dvc repro` from nothing (train and evaluate per seed, video, report);
- the work the stages report doing: training (every seed's `metrics/seeds/S/train.json`
  wall_s, evaluations during training included), evaluation (`metrics/seeds/S/eval.json`)
  and video rendering and encoding (`metrics/video.json`);
- overhead = repro wall - that work: DVC itself, interpreter start-up and imports of every
  stage process, building envs and policies, loading and saving checkpoints, and the report;
- a second `dvc repro` (nothing to do). Targets: overhead <= 10%, no-op <= 5 s.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import print_table, scratch_env, verdict, write_json
from benchmarks.common import run_timed as run

TARGET_OVERHEAD = 0.10
TARGET_NOOP_S = 5.0
REPO = Path(__file__).resolve().parents[1]


def fresh_project(dest: Path, env: dict[str, str]) -> None:
    """The committed tree of this repo (+ the working params.yaml) as a new git repo."""
    archive = subprocess.run(
        ["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    shutil.copy(REPO / "params.yaml", dest / "params.yaml")
    for path in ("dvc.lock", "metrics", "reports/run"):  # results of earlier runs
        target = dest / path
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    run(["git", "init", "-q"], dest, env)
    run(["git", "add", "-A"], dest, env)
    run(["git", "commit", "-qm", "benchmark copy"], dest, env)


def one_run(env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pipeline-overhead-") as tmp:
        root = Path(tmp)
        fresh_project(root, env)
        dvc = [sys.executable, "-m", "dvc", "repro"]
        total = run(dvc, root, env)
        noop = run(dvc, root, env)

        def wall(pattern: str) -> float:
            files = sorted((root / "metrics").glob(pattern))
            return sum(float(json.loads(f.read_text())["wall_s"]) for f in files)

        work = {"train_s": wall("seeds/*/train.json"), "eval_s": wall("seeds/*/eval.json")}
        work["video_s"] = wall("video.json")
    done = sum(work.values())
    return {
        "repro_s": total,
        **work,
        "overhead_s": total - done,
        "overhead_share": (total - done) / total,
        "noop_s": noop,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1, help="fresh repros; medians reported")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        raise SystemExit("git is needed (the pipeline runs in a temporary git repo)")
    env = scratch_env()
    print("dvc repro of the default experiment (params.yaml) in a fresh copy; threads from it")
    rows = []
    for rep in range(args.reps):
        print(f"... repetition {rep + 1}/{args.reps}", flush=True)
        rows.append(one_run(env))
    cols = ["repro_s", "train_s", "eval_s", "video_s", "overhead_s", "overhead_share", "noop_s"]
    median = {k: statistics.median(r[k] for r in rows) for k in cols}
    print()
    print_table(
        [{"run": str(i + 1), **r} for i, r in enumerate(rows)] + [{"run": "median", **median}],
        [("run", "run", "")] + [(k, k, ".3f") for k in cols],
    )
    checks = [
        ("overhead share of repro wall", median["overhead_share"], TARGET_OVERHEAD),
        ("no-op repro seconds", median["noop_s"], TARGET_NOOP_S),
    ]
    print()
    for label, value, target in checks:
        print(f"{label}: {value:.3f} (target <= {target}): {verdict(value, target, False)}")
    write_json(args.json, {"benchmark": "pipeline_overhead", "reps": args.reps}, {"rows": rows})


if __name__ == "__main__":
    main()
