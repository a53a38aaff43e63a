"""Search throughput on PostgreSQL: trials per minute with 1, 2, 3 workers.

Run from the repository root (needs the `dev` extra: psycopg, and pgserver for the local
server):

    .venv/bin/python -m benchmarks.search_throughput
    .venv/bin/python -m benchmarks.search_throughput --workers 1 3 --trials 30
    .venv/bin/python -m benchmarks.search_throughput --storage postgresql+psycopg://u:pw@h/db

Starts a local PostgreSQL server (the `pgserver` wheel's binaries) unless `--storage` names
one. For each worker count W, a fresh study of `--params`'s search section (the default
study) runs through `pipelines.search.stage.search` with `--workers W` on that database: W
processes, one torch thread each (`runtime.threads: 1`). Every worker count runs the same
`--trials` trials: values drawn once from the space (a seeded random sampler) and
enqueued (`search.enqueue`), so the work is identical and only the parallelism differs;
studies that sample on their own would compare different mixes of fast and slow trials.
The pruner is off, so every trial trains to its budget or stop target as it would alone.
The rate is trials over the span from the first trial's start to the last one's end
(interpreter start-up excluded), against the one-worker rate.

Target (issue 25): 3 workers >= 2.5x one worker's trials per minute. Trials are CPU-bound,
so W workers can only gain while each has a core: the table prints the CPUs this process
may use.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import yaml

from benchmarks.common import base_parser, print_table, setup, write_json
from pipelines.layout import Layout
from pipelines.params import load_params, parse_params, plain_data
from pipelines.search.sampling import sample
from pipelines.search.stage import search
from pipelines.search.study import open_study

TARGET_SPEEDUP_3 = 2.5


def local_postgres(root: Path) -> str:
    """A PostgreSQL server of the pgserver wheel on a Unix socket in `root`: its URL."""
    import pgserver

    server = pgserver.get_server(root, cleanup_mode="stop")  # stopped when we exit
    return server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1)


def drawn_trials(data: dict[str, Any], trials: int, seed: int) -> list[dict[str, Any]]:
    """`trials` value sets drawn from the search space, the same for every worker count."""
    space = parse_params(data).search.space
    scratch = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    drawn = []
    for _ in range(trials):
        trial = scratch.ask()
        drawn.append(sample(trial, space))
        scratch.tell(trial, 0.0)
    return drawn


def study_data(params_path: Path, storage: str, workers: int, trials: int) -> dict[str, Any]:
    data = plain_data(yaml.safe_load(params_path.read_text()))
    search_section = {
        **data.get("search", {}),
        "storage": storage,
        "study_name": f"throughput-{workers}w-{os.getpid()}-{time.time_ns()}",
        "n_trials": trials,
        "pruner": "none",
        "enqueue": drawn_trials(data, trials, seed=0),
    }
    return {**data, "search": search_section, "runtime": {**data.get("runtime", {}), "threads": 1}}


def measure(root: Path, data: dict[str, Any], workers: int) -> dict[str, Any]:
    directory = root / f"w{workers}"
    directory.mkdir()
    params_file = directory / "params.yaml"
    params_file.write_text(yaml.safe_dump(data, sort_keys=False))
    params = parse_params(data)
    start = time.perf_counter()
    search(params, Layout(directory), workers=workers, params_path=params_file)
    wall = time.perf_counter() - start
    trials = open_study(params, Layout(directory)).get_trials()
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    first = min(t.datetime_start for t in done)
    last = max(t.datetime_complete for t in done)
    span = (last - first).total_seconds()
    durations = [t.duration.total_seconds() for t in done]
    numbers = [t.number for t in trials]
    return {
        "workers": workers,
        "trials": len(done),
        "span_s": span,
        "wall_s": wall,
        "per_min": 60.0 * len(done) / span,
        "trial_s": statistics.median(durations),
        "unique": len(numbers) == len(set(numbers)),
    }


COLUMNS = [
    ("workers", "workers", "d"),
    ("trials", "trials", "d"),
    ("span_s", "first start to last end s", ".1f"),
    ("trial_s", "median trial s", ".1f"),
    ("per_min", "trials/min", ".2f"),
    ("speedup", "x 1 worker", ".2f"),
    ("wall_s", "wall s (with start-up)", ".1f"),
]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--trials", type=int, default=18, help="per worker count")
    parser.add_argument("--storage", default=None, help="a database URL; default: local")
    args = parser.parse_args(argv)
    meta = setup(args, "Search throughput on PostgreSQL", method="one study per worker count")
    load_params(args.params)  # fails in one line on a bad params file
    with tempfile.TemporaryDirectory(prefix="search-throughput-") as tmp:
        root = Path(tmp)
        storage = args.storage or local_postgres(root / "pg")
        rows = []
        for workers in args.workers:
            data = study_data(args.params, storage, workers, args.trials)
            rows.append(measure(root, data, workers))
    base = next((r["per_min"] for r in rows if r["workers"] == 1), None)
    for row in rows:
        row["speedup"] = row["per_min"] / base if base else float("nan")
    print()
    print_table(rows, COLUMNS)
    three = next((r for r in rows if r["workers"] == 3), None)
    if three is not None and base:
        print(
            f"3 workers: {three['speedup']:.2f}x one worker's trials per minute (target >= "
            f"{TARGET_SPEEDUP_3}x) on {meta['cpus_usable']} usable CPUs; trial numbers unique: "
            f"{all(r['unique'] for r in rows)}"
        )
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
