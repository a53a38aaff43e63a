"""A training iteration of this checkout's rlcore against a git revision's, in one process.

Run from the repository root:

    .venv/bin/python -m benchmarks.versus_revision --rev eb46892
    .venv/bin/python -m benchmarks.versus_revision --rev HEAD~3 --tasks gym_cartpole --reps 41
    .venv/bin/python -m benchmarks.versus_revision --rev HEAD~1 --tasks push_cube --num-envs 4096

`git archive REV rlcore` is unpacked into a temporary directory as the package
`rlcore_at_rev` (every `rlcore` name in its sources renamed), so both versions import side
by side. For each task preset, one Trainer of each version is built from the same config
(evaluation off); then, in `--reps` interleaved repetitions (the order alternating), each
collects a rollout and updates on it, and the collection and the update are timed
separately, in this process's CPU time (with torch on `--threads` 1 and the envs in this
process, the work done: other load on the machine barely moves it, where wall time would
take its share). Reports the median times and the median of the per-repetition ratios
(this checkout / the revision). Both trainers start from the
same seed, so they stay bit-identical unless a change was meant to alter the numbers;
the last column says whether their parameters were still equal at the end.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.presets import PRESETS

DEFAULT_TASKS = ["gym_cartpole", "gym_hopper", "push_cube", "mujoco_halfcheetah"]
PACKAGE = "rlcore_at_rev"


def import_revision(rev: str, into: Path) -> ModuleType:
    """Unpack `rev`'s rlcore as `rlcore_at_rev` under `into` and import it."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", rev, "rlcore"], capture_output=True, check=True
        ).stdout
    except subprocess.CalledProcessError as error:
        message = error.stderr.decode().strip()
        raise SystemExit(f"git archive {rev} rlcore failed: {message}") from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    package = into / PACKAGE
    (into / "rlcore").rename(package)
    for source in package.rglob("*.py"):
        source.write_text(re.sub(r"\brlcore\b", PACKAGE, source.read_text()))
    sys.path.insert(0, str(into))
    return importlib.import_module(PACKAGE)


def measure(task: str, reps: int, num_envs: int | None = None) -> dict[str, Any]:
    from rlcore.trainer import Trainer

    at_rev = importlib.import_module(f"{PACKAGE}.trainer")
    presets_at_rev = importlib.import_module(f"{PACKAGE}.presets")
    trainers: dict[str, Any] = {}
    for name, presets, trainer_cls in (
        ("checkout", PRESETS, Trainer),
        ("revision", presets_at_rev.PRESETS, at_rev.Trainer),
    ):
        base = presets[task]
        trainer_cfg = dataclasses.replace(base.trainer, eval_every_iters=0)
        env_cfg = dataclasses.replace(base.env, num_envs=num_envs or base.env.num_envs)
        trainers[name] = trainer_cls(dataclasses.replace(base, trainer=trainer_cfg, env=env_cfg))
    samples: dict[tuple[str, str], list[float]] = {
        (name, part): [] for name in trainers for part in ("collect", "update")
    }
    order = list(trainers.items())
    for rep in range(reps + 1):  # the first is a warm-up
        for name, trainer in order if rep % 2 == 0 else order[::-1]:
            start = time.process_time()  # CPU time: what other load on the machine leaves alone
            trainer.collector.collect()
            collected = time.process_time()
            trainer.algo.update(trainer.rollout)
            if rep:
                samples[(name, "collect")].append(collected - start)
                samples[(name, "update")].append(time.process_time() - collected)
    identical = all(
        torch.equal(a, b)
        for a, b in zip(
            trainers["checkout"].policy.parameters(),
            trainers["revision"].policy.parameters(),
            strict=True,
        )
    )
    for trainer in trainers.values():
        trainer.env.close()
    row: dict[str, Any] = {"task": task, "identical": "yes" if identical else "no"}
    for part in ("collect", "update"):
        ours, theirs = samples[("checkout", part)], samples[("revision", part)]
        row[f"{part}_rev_ms"] = statistics.median(theirs) * 1e3
        row[f"{part}_ms"] = statistics.median(ours) * 1e3
        row[f"{part}_ratio"] = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
    return row


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the git revision to compare against")
    parser.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS, choices=sorted(PRESETS))
    parser.add_argument("--num-envs", type=int, help="N for every task (default: its preset's)")
    parser.set_defaults(reps=21)
    args = parser.parse_args(argv)
    meta = setup(
        args,
        f"versus_revision ({args.rev})",
        method=f"{args.reps} interleaved repetitions of collect + update per version",
    )
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        import_revision(args.rev, Path(scratch))
        for task in args.tasks:
            print(f"... {task}", flush=True)
            rows.append(measure(task, args.reps, args.num_envs))
    print()
    print_table(
        rows,
        [("task", "task", ""), ("collect_rev_ms", f"collect CPU ms @{args.rev}", ".1f"),
         ("collect_ms", "collect CPU ms", ".1f"), ("collect_ratio", "ratio", ".3f"),
         ("update_rev_ms", f"update CPU ms @{args.rev}", ".1f"),
         ("update_ms", "update CPU ms", ".1f"),
         ("update_ratio", "ratio", ".3f"), ("identical", "same params", "")],
    )  # fmt: skip
    write_json(args.json, meta, {"rev": args.rev, "rows": rows})


if __name__ == "__main__":
    main()
