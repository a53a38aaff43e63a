"""Wall time of `dvc repro` of the default experiment, and each stage's overhead in seconds.

Run from the repository root (needs git):

    .venv/bin/python -m benchmarks.pipeline_overhead            # the default experiment
    .venv/bin/python -m benchmarks.pipeline_overhead --reps 3

Each repetition copies the committed project (`git archive HEAD`, plus this working tree's
params.yaml) into a fresh temporary git repo, so the results in this checkout are never
touched, and times there:

- `dvc repro` from nothing, each stage timed from DVC's `Running stage` line to the next
  (or to DVC's exit): train and evaluate per seed, video, report;
- the work each stage reports doing: training (`metrics/seeds/S/train.json` wall_s,
  evaluations during training included), evaluation (`metrics/seeds/S/eval.json`), video
  rendering and encoding (`metrics/video.json`); the report's is all overhead;
- a stage's overhead = its wall - its work: interpreter start-up and imports, building envs
  and policies, loading and saving checkpoints, and DVC's hashing and lock file after it;
  DVC's own start (before the first stage) is listed apart;
- a second `dvc repro` (nothing to do).

Targets: every stage's overhead <= 5 s, a no-op repro <= 5 s. Overhead is judged per stage
in seconds, not as a share of the run: a share is made small by training longer, which
costs the user time and shows nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import print_table, scratch_env, verdict, write_json
from benchmarks.common import run_timed as run

TARGET_STAGE_S = 5.0
TARGET_NOOP_S = 5.0
STAGE_LINE = re.compile(r"^Running stage '([^']+)'")
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


def timed_repro(root: Path, env: dict[str, str]) -> tuple[float, dict[str, float]]:
    """`dvc repro` in `root`: its wall seconds, and each stage's (plus `dvc start`)."""
    start = time.perf_counter()
    marks: list[tuple[str, float]] = [("dvc start", start)]
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "dvc", "repro"], cwd=root, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if match := STAGE_LINE.match(line):
                marks.append((match[1], time.perf_counter()))
    end = time.perf_counter()
    if process.returncode:
        raise SystemExit("dvc repro failed:\n" + "".join(lines[-30:]))
    ends = [t for _, t in marks[1:]] + [end]
    return end - start, {name: stop - t for (name, t), stop in zip(marks, ends, strict=True)}


def work_of(root: Path, stage: str) -> float:
    """The seconds of real work a stage reports (its metrics file's wall_s)."""
    name, _, seed = stage.partition("@")
    files = {
        "train": root / "metrics" / "seeds" / seed / "train.json",
        "evaluate": root / "metrics" / "seeds" / seed / "eval.json",
        "video": root / "metrics" / "video.json",
    }
    path = files.get(name)
    return float(json.loads(path.read_text())["wall_s"]) if path else 0.0


def one_run(env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pipeline-overhead-") as tmp:
        root = Path(tmp)
        fresh_project(root, env)
        total, stages = timed_repro(root, env)
        noop = run([sys.executable, "-m", "dvc", "repro"], root, env)
        work = {stage: work_of(root, stage) for stage in stages}
    overhead = {stage: stages[stage] - work[stage] for stage in stages}
    return {"repro_s": total, "stages": stages, "work": work, "overhead": overhead,
            "noop_s": noop}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1, help="fresh repros; medians reported")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        raise SystemExit("git is needed (the pipeline runs in a temporary git repo)")
    env = scratch_env()
    print("dvc repro of the default experiment (params.yaml) in a fresh copy; threads from it")
    runs = []
    for rep in range(args.reps):
        print(f"... repetition {rep + 1}/{args.reps}", flush=True)
        runs.append(one_run(env))
    stages = list(runs[0]["stages"])
    rows = [
        {
            "stage": stage,
            "wall_s": statistics.median(r["stages"][stage] for r in runs),
            "work_s": statistics.median(r["work"][stage] for r in runs),
            "overhead_s": statistics.median(r["overhead"][stage] for r in runs),
        }
        for stage in stages
    ]
    total = statistics.median(r["repro_s"] for r in runs)
    rows.append({"stage": "dvc repro (all)", "wall_s": total,
                 "work_s": sum(r["work_s"] for r in rows),
                 "overhead_s": sum(r["overhead_s"] for r in rows)})  # fmt: skip
    print()
    print_table(
        rows,
        [("stage", "stage", ""), ("wall_s", "wall s", ".2f"), ("work_s", "work s", ".2f"),
         ("overhead_s", "overhead s", ".2f")],
    )  # fmt: skip
    worst = max((r for r in rows[:-1] if r["stage"] != "dvc start"), key=lambda r: r["overhead_s"])
    noop = statistics.median(r["noop_s"] for r in runs)
    checks = [
        (f"largest stage overhead ({worst['stage']}), s", worst["overhead_s"], TARGET_STAGE_S),
        ("no-op repro, s", noop, TARGET_NOOP_S),
    ]
    print()
    for label, value, target in checks:
        print(f"{label}: {value:.2f} (target <= {target:g}): {verdict(value, target, False)}")
    write_json(args.json, {"benchmark": "pipeline_overhead", "reps": args.reps}, {"runs": runs})


if __name__ == "__main__":
    main()
