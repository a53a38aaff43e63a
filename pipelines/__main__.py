"""`python -m pipelines <command>`: the DVC stages, the Prefect flow and its schedule.

Stages (DVC runs these; see dvc.yaml): train, evaluate, video, report; and search
(search/dvc.yaml: an Optuna study, `search --workers N` for N local processes).
Prefect: `flow` runs the stages as one flow run; `serve` registers the scheduled deployment.
Exit codes: 0 done, 1 the stage failed (message on stderr), 2 invalid params.yaml.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from pipelines.layout import Layout

STAGES = ("train", "evaluate", "video", "report")


def _stage(name: str) -> Callable[..., object]:
    # Imported on demand: each stage pays only for what it uses (torch, imageio, matplotlib).
    if name == "train":
        from pipelines.train import train

        return train
    if name == "evaluate":
        from pipelines.evaluate import evaluate

        return evaluate
    if name == "video":
        from pipelines.video import record

        return record
    from pipelines.report import report

    return report


def run_stage(name: str, params_path: Path) -> int:
    """Validate params, run one stage, and turn expected failures into one-line errors."""
    from pipelines.params import ParamsError, load_params

    try:
        params = load_params(params_path)
    except ParamsError as exc:
        for line in exc.lines:
            print(f"error: {exc.path}: {line}", file=sys.stderr)
        return 2
    from rlcore.errors import CheckpointError, NonFiniteError

    try:
        _stage(name)(params)
    except (FileNotFoundError, CheckpointError, NonFiniteError) as exc:
        print(f"error: {name}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"error: {name}: interrupted; earlier outputs were left intact", file=sys.stderr)
        return 130
    return 0


def run_search(argv: list[str]) -> int:
    """`search`: the study (coordinator), or `--worker`: one extra process of it."""
    parser = argparse.ArgumentParser(prog="python -m pipelines search")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--workers", type=int, default=1, help="local worker processes")
    parser.add_argument(
        "--join", action="store_true", help="join a running study (keep its RUNNING trials)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from pipelines.params import ParamsError, load_params

    try:
        params = load_params(args.params)
    except ParamsError as exc:
        for line in exc.lines:
            print(f"error: {exc.path}: {line}", file=sys.stderr)
        return 2
    from pipelines.search import SearchError, run_worker, search

    try:
        if args.worker:
            run_worker(params, Layout())
        else:
            search(params, workers=args.workers, join=args.join, params_path=args.params)
    except SearchError as exc:
        print(f"error: search: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: search: interrupted; the study keeps every finished trial", file=sys.stderr)
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "flow":
        from pipelines.flows import flow_main

        return flow_main(argv[1:])
    if argv and argv[0] == "search":
        return run_search(argv[1:])
    if argv and argv[0] == "serve":
        from pipelines.serve import serve_main

        return serve_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m pipelines", description=__doc__)
    parser.add_argument("command", choices=[*STAGES, "search", "flow", "serve"])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    args = parser.parse_args(argv)
    return run_stage(args.command, args.params)


if __name__ == "__main__":
    raise SystemExit(main())
