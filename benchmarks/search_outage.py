"""A PostgreSQL outage during a 3-worker search: trials completed, lost and duplicated.

Run from the repository root (needs the `dev` extra: psycopg, and pgserver for the server):

    .venv/bin/python -m benchmarks.search_outage
    .venv/bin/python -m benchmarks.search_outage --outage-s 60 --trials 12 --workers 3

Starts a PostgreSQL server of the `pgserver` wheel on a localhost port (the search tests'
`tests/pipelines/search/postgres_server.py`), runs `python -m pipelines search --workers W` on a
study of `--trials` small CartPole trials, and once a trial has completed and W others
run, stops the server (`pg_ctl stop -m immediate`: every connection dropped, as in a crash)
for `--outage-s` seconds and starts it again on the same port. The search must wait for it
(`search.db_outage_s`, here `--db-outage-s`) and complete the study.

Figures: the search's exit status and its stderr's tracebacks; the study's trials by state;
lost (the study's `n_trials` less its complete trials), duplicated (two trials from one
creation, or two runs of one failed trial); the outage as each process saw it (its
"lost the database" and "back after" lines).

Target (issue 43): a 60 s outage during a 3-worker search, the study completes `n_trials`
with no trial lost or counted twice, exit 0, no traceback.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from benchmarks.common import base_parser, setup, write_json
from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.outage import CREATION
from pipelines.search.study import open_study
from pipelines.search.trials import retry_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pipelines"))
from postgres_server import postgres_server

BACK = re.compile(r"\[search\] the database is back after ([0-9.]+) s")


def study_data(url: str, trials: int, trial_steps: int, db_outage_s: float) -> dict[str, Any]:
    return {
        "name": "search-outage",
        "preset": "none",
        "env": {"name": "cartpole", "num_envs": 8},
        "policy": {"hidden_sizes": [16], "activation": "relu"},
        "algorithm": {"ppo": {"num_epochs": 2, "num_minibatches": 2}},
        "trainer": {"total_env_steps": trial_steps, "num_steps": 16, "eval_episodes": 2},
        "runtime": {"threads": 1},
        "search": {
            "study_name": "outage",
            "space": {
                "algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            },
            "overrides": {"trainer.eval_every_iters": 20},
            "pruner": "none",
            "sampler": "random",
            "n_trials": trials,
            "storage": url,
            "heartbeat_s": 5,
            "grace_s": 20,  # shorter than the outage: no live trial may be failed after it
            "db_outage_s": db_outage_s,
        },
    }


def running_mid_search(data: dict[str, Any], root: Path, workers: int) -> bool:
    states = [t.state for t in open_study(parse_params(data), Layout(root)).get_trials()]
    return TrialState.COMPLETE in states and states.count(TrialState.RUNNING) >= workers


def measure(args: Any, root: Path) -> dict[str, Any]:
    with postgres_server() as server:
        data = study_data(server.url, args.trials, args.trial_steps, args.db_outage_s)
        (root / "params.yaml").write_text(yaml.safe_dump(data))
        started = time.monotonic()
        with (root / "out.log").open("w") as stdout, (root / "err.log").open("w") as stderr:
            search = subprocess.Popen(
                [sys.executable, "-m", "pipelines", "search", "--workers", str(args.workers)],
                cwd=root, stdout=stdout, stderr=stderr, text=True,
            )  # fmt: skip
        try:
            while not running_mid_search(data, root, args.workers):
                if search.poll() is not None:
                    raise SystemExit(f"the search ended before the outage: {root / 'err.log'}")
                time.sleep(0.5)
            down_at = time.monotonic() - started
            server.stop()
            time.sleep(args.outage_s)
            server.start()
            outage = time.monotonic() - started - down_at
            search.wait(timeout=args.outage_s + 600)
        finally:
            search.kill()
        wall = time.monotonic() - started
        out, err = (root / "out.log").read_text(), (root / "err.log").read_text()
        trials = open_study(parse_params(data), Layout(root)).get_trials()
    states = Counter(t.state.name.lower() for t in trials)
    failed = [t.number for t in trials if t.state == TrialState.FAIL]
    retries = Counter(retry_of(t) for t in trials if retry_of(t) is not None)
    tokens = Counter(t.system_attrs.get(CREATION) for t in trials)
    return {
        "exit": search.returncode,
        "tracebacks": (out + err).count("Traceback"),
        "stderr_lines": [line for line in err.splitlines() if not line.startswith("[I ")],
        "trials": len(trials),
        "n_trials": args.trials,
        "states": dict(states),
        "failed": failed,
        "lost": max(0, args.trials - states["complete"]),
        "duplicated": sum(n - 1 for n in tokens.values()) + sum(n - 1 for n in retries.values()),
        "down_at_s": down_at,
        "outage_s": outage,
        "processes_lost_it": out.count("[search] lost the database"),
        "back_after_s": [float(s) for s in BACK.findall(out)],
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3, help="search processes")
    parser.add_argument("--trials", type=int, default=12, help="the study's n_trials")
    parser.add_argument("--outage-s", type=float, default=60.0, help="the server's downtime")
    parser.add_argument("--db-outage-s", type=float, default=300.0, help="search.db_outage_s")
    parser.add_argument("--trial-steps", type=int, default=8 * 16 * 400, help="env steps per trial")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # its study is opened every 0.5 s
    meta = setup(args, "Search through a PostgreSQL outage", method="one run (--reps unused)")
    with tempfile.TemporaryDirectory(prefix="search-outage-") as tmp:
        row = measure(args, Path(tmp))
    print()
    print(
        f"server stopped {row['down_at_s']:.1f} s into the search, for {row['outage_s']:.1f} s "
        f"(--outage-s {args.outage_s:g} plus its restart); search.db_outage_s "
        f"{args.db_outage_s:g}"
    )
    seen = ", ".join(f"{s:.1f}" for s in row["back_after_s"]) or "-"
    print(
        f"processes that lost the database: {row['processes_lost_it']} of {args.workers}; "
        f"outage each saw until it was back (s): {seen}"
    )
    states = ", ".join(f"{n} {state}" for state, n in sorted(row["states"].items()))
    print(
        f"trials: {row['trials']} ({states}) for n_trials {args.trials}; completed "
        f"{row['states'].get('complete', 0)}, lost {row['lost']}, duplicated {row['duplicated']}"
        + (f", failed {row['failed']}" if row["failed"] else "")
    )
    print(
        f"search exit {row['exit']}, tracebacks {row['tracebacks']}, other stderr lines "
        f"{len(row['stderr_lines'])}; wall {row['wall_s']:.1f} s"
    )
    for line in row["stderr_lines"]:
        print(f"  stderr: {line}")
    met = row["exit"] == 0 and not row["tracebacks"] and not row["lost"] and not row["duplicated"]
    verdict = "met" if met else "NOT met"
    print(f"target (completes n_trials, none lost or duplicated, exit 0): {verdict}")
    write_json(args.json, meta, row)


if __name__ == "__main__":
    main()
