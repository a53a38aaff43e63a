"""Train one experiment from the command line, showing progress and writing its run folder.

Usage: python -m pipelines.train [--preset cartpole] [--run-dir runs/cartpole] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlcore.checkpoint import CheckpointError
from rlcore.presets import PRESETS, preset
from rlcore.runtime import configure_cpu
from rlcore.trainer import Trainer


class JsonlSink:
    """Append every metrics record to a JSON-lines file and print evaluations."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = time.perf_counter()

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps({"env_steps": step, **metrics}) + "\n")
        if "eval/episode_return" in metrics:
            extra = metrics.get("eval/success_rate")
            success = "" if extra is None else f"  success {extra:.2f}"
            print(
                f"[{time.perf_counter() - self.start:7.1f}s] {step:>9,d} steps  "
                f"eval return {metrics['eval/episode_return']:9.2f}{success}",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="cartpole", choices=sorted(PRESETS))
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", action="store_true", help="continue from the run's checkpoint")
    start.add_argument(
        "--overwrite", action="store_true", help="start afresh, replacing an existing run folder"
    )
    args = parser.parse_args(argv)
    configure_cpu(args.threads)
    cfg = preset(args.preset)
    run_dir = args.run_dir or Path("runs") / args.preset
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint, metrics = run_dir / "checkpoint.pt", run_dir / "metrics.jsonl"
    if checkpoint.exists() and not (args.resume or args.overwrite):
        print(
            f"error: {run_dir} already holds a run; pass --resume to continue it, "
            "--overwrite to replace it, or --run-dir for a new folder",
            file=sys.stderr,
        )
        return 2
    if args.overwrite:
        metrics.unlink(missing_ok=True)
    trainer = Trainer(cfg, JsonlSink(metrics))
    if args.resume:
        try:
            trainer.load(checkpoint)
        except CheckpointError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    result = trainer.run(checkpoint_path=checkpoint)
    summary = {"env_steps": result.env_steps, "wall_s": result.wall_s, **result.eval_metrics}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"done: {json.dumps(summary)}\ncheckpoint: {checkpoint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
