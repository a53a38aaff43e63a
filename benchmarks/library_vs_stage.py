"""A library user's training against the same experiment through the train stage.

Run from the repository root, e.g.

    .venv/bin/python -m benchmarks.library_vs_stage
    .venv/bin/python -m benchmarks.library_vs_stage --algorithms ppo --envs pendulum --reps 5

Per (env, algorithm), taking turns `--reps` times, two fresh processes:

- `library`: docs/library.md's example, `rlcore.configure_cpu()` then
  `Trainer(experiment_for(env, algorithm)).run()`;
- `stage`: `python -m pipelines train` in a scratch folder whose params.yaml sets only
  `env.name`, `algorithm.name` and `seeds: [0]` (so `preset: auto`, the same experiment),
  with the stage's defaults (DVCLive and TensorBoard on, checkpoints, the progress line).

Each is timed from process start to exit (imports included), and both must train the same
number of env steps (the same seed reaches the same stop target). Reported: the medians
and library / stage (the target: <= 1.2, a library user is not slower than the pipeline).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import base_parser, print_table, setup, write_json

REPO = Path(__file__).resolve().parents[1]
LIBRARY = """
import sys, rlcore
rlcore.configure_cpu()
trainer = rlcore.Trainer(rlcore.experiment_for(sys.argv[1], algorithm=sys.argv[2]))
trainer.run()
print("env_steps", trainer.env_steps)
"""


def _timed(args: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return wall, done.stdout


def library_run(env: str, algorithm: str) -> tuple[float, int]:
    wall, out = _timed([sys.executable, "-c", LIBRARY, env, algorithm], REPO)
    return wall, int(out.split("env_steps")[-1])


def stage_run(env: str, algorithm: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        params = {"seeds": [0], "env": {"name": env}, "algorithm": {"name": algorithm}}
        (root / "params.yaml").write_text(yaml.safe_dump(params))
        wall, _ = _timed([sys.executable, "-m", "pipelines", "train"], root)
        metrics = json.loads((root / "metrics" / "seeds" / "0" / "train.json").read_text())
        return wall, int(metrics["env_steps"])


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["pendulum"])
    parser.add_argument("--algorithms", nargs="+", default=["ppo", "sac"])
    parser.set_defaults(reps=3)
    args = parser.parse_args(argv)
    meta = setup(args, "library_vs_stage", method="fresh processes, taking turns, medians")
    rows: list[dict[str, Any]] = []
    for env in args.envs:
        for algorithm in args.algorithms:
            times: dict[str, list[float]] = {"library": [], "stage": []}
            steps: set[int] = set()
            for rep in range(args.reps):
                for name, run in (("library", library_run), ("stage", stage_run)):
                    wall, env_steps = run(env, algorithm)
                    times[name].append(wall)
                    steps.add(env_steps)
                    print(f"... {env} {algorithm} rep {rep} {name}: {wall:.1f} s, "
                          f"{env_steps:,} env steps", flush=True)  # fmt: skip
            library, stage = (statistics.median(times[k]) for k in ("library", "stage"))
            rows.append({
                "env": env, "algorithm": algorithm, "env_steps": "/".join(map(str, sorted(steps))),
                "library_s": library, "stage_s": stage, "ratio": library / stage,
                "library_all": times["library"], "stage_all": times["stage"],
            })  # fmt: skip
    print()
    print_table(
        rows,
        [("env", "env", ""), ("algorithm", "algorithm", ""), ("env_steps", "env steps", ""),
         ("library_s", "library s (median)", ".1f"), ("stage_s", "train stage s (median)", ".1f"),
         ("ratio", "library / stage", ".2f")],
    )  # fmt: skip
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
