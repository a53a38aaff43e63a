"""`python -m pipelines <command>`: the DVC stages, the Prefect flow and its schedule.

Stages (DVC runs these; see dvc.yaml): train, evaluate, video, report.
Prefect: `flow` runs the stages as one flow run; `serve` registers the scheduled deployment.
Exit codes: 0 done, 1 the stage failed (message on stderr), 2 invalid params.yaml.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "flow":
        from pipelines.flows import flow_main

        return flow_main(argv[1:])
    if argv and argv[0] == "serve":
        from pipelines.serve import serve_main

        return serve_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m pipelines", description=__doc__)
    parser.add_argument("command", choices=[*STAGES, "flow", "serve"])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    args = parser.parse_args(argv)
    return run_stage(args.command, args.params)


if __name__ == "__main__":
    raise SystemExit(main())
