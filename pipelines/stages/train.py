"""The `train` stage: training with a learning curve and resumable progress.

One run per seed. Outputs (see `Layout`, for seed S): `outputs/seeds/S/checkpoints/final.pt`
and `best.pt` (the policy of the best evaluation),
`metrics/seeds/S/curve.csv` (one row per evaluation), `metrics/seeds/S/train.json` and
`metrics/seeds/S/provenance.json` (the CPU, kernels and packages it ran on) and DVCLive's
`metrics/seeds/S/live/` (written to `outputs/seeds/S/live.partial/` meanwhile). They are
replaced together, only when training completes (`StagedOutputs`), so a failed or
interrupted run leaves the previous ones intact, and an unwritable one fails before
training. Progress is saved to `outputs/seeds/S/checkpoints/resume.pt` every
`trainer.checkpoint_every_iters` iterations; the next run of the same configuration
continues from it bit-identically.

Run as K torch.distributed processes (`runtime.processes`, or `torchrun ... -m pipelines
train`), every rank trains on its own envs and rank 0 alone writes these files.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.files import StagedOutputs, remove_stale_temporaries
from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.stages.lifeline import run_lock
from pipelines.stages.progress import Progress, StopTarget, startup_seconds
from pipelines.stages.run_name import run_name, train_params
from pipelines.stages.telemetry import Telemetry, fan_out, tensorboard_run
from rlcore.checkpoint import CheckpointError, config_hash, save_checkpoint
from rlcore.distributed import process_group_from_env
from rlcore.runtime import configure_cpu, provenance
from rlcore.trainer import Trainer

CURVE_COLUMNS = (
    "env_steps",
    "wall_s",
    "eval_return",
    "eval_return_min",
    "eval_success_rate",
    "train_return",
)


@dataclass
class Curve:
    """Learning-curve rows and the training wall time they were measured at."""

    total_env_steps: int
    rows: list[dict[str, float]] = field(default_factory=list)
    elapsed_before: float = 0.0  # wall seconds of earlier (interrupted) runs
    started: float = field(default_factory=time.perf_counter)
    last_train_return: float = float("nan")
    progress: Progress | None = None  # the stage's bar (rank 0), advanced every iteration

    @property
    def wall_s(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    def __call__(self, env_steps: int, metrics: dict[str, float]) -> None:
        """The Trainer's metrics sink: keep training returns, record and show evaluations."""
        if "train/episode_return" in metrics:
            self.last_train_return = metrics["train/episode_return"]
        if "eval/episode_return" not in metrics:
            if self.progress is not None:
                last = self.rows[-1]["eval_return"] if self.rows else None
                self.progress.update(env_steps, **({} if last is None else {"eval": f"{last:.1f}"}))
            return
        row = {
            "env_steps": float(env_steps),
            "wall_s": self.wall_s,
            "eval_return": metrics["eval/episode_return"],
            "eval_return_min": metrics["eval/episode_return_min"],
            "train_return": self.last_train_return,
        }
        if "eval/success_rate" in metrics:
            row["eval_success_rate"] = metrics["eval/success_rate"]
        self.rows.append(row)
        if self.progress is not None:
            self.progress.evaluated(env_steps, stop_values(row))
        success = f"  success {row['eval_success_rate']:.2f}" if "eval_success_rate" in row else ""
        share = env_steps / self.total_env_steps
        line = (
            f"[train {row['wall_s']:6.1f}s] {env_steps:>10,d}/{self.total_env_steps:,d} steps "
            f"({share:4.0%})  eval return {row['eval_return']:8.2f}{success}"
        )
        if self.progress is not None:
            self.progress.note(line)
        else:
            print(line, flush=True)

    def state(self) -> dict[str, Any]:
        return {"rows": self.rows, "wall_s": self.wall_s}


def stop_values(row: dict[str, float]) -> dict[str, float]:
    """A curve row's values by the names of the stop targets (`TrainerConfig.stop_at`)."""
    return {"return": row["eval_return"], "success": row.get("eval_success_rate", math.nan)}


class BestPolicy:
    """A metrics sink that keeps the policy of the best evaluation so far (in memory; saved
    as `best.pt` with the stage's other outputs, and in resumable progress).

    Better means a higher success rate where the env reports one, then a higher return.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.score: tuple[float, float] | None = None
        self.state: dict[str, Any] | None = None

    def __call__(self, env_steps: int, metrics: dict[str, float]) -> None:
        if "eval/episode_return" not in metrics:
            return
        score = (metrics.get("eval/success_rate", 0.0), metrics["eval/episode_return"])
        if self.score is not None and score <= self.score:
            return
        self.score = score
        policy = {k: v.detach().clone() for k, v in self.trainer.policy.state_dict().items()}
        self.state = {
            "config_hash": config_hash(self.trainer.cfg),
            "iteration": self.trainer.iteration,
            "env_steps": env_steps,
            "policy": policy,
            "eval": dict(metrics),
        }

    def progress(self) -> dict[str, Any]:
        return {"score": self.score, "state": self.state}

    def restore(self, saved: dict[str, Any] | None) -> None:
        if saved:
            score = saved["score"]
            self.score = None if score is None else tuple(score)
            self.state = saved["state"]


def _telemetry(
    params: Params, layout: Layout, resumed_at: int | None, steps_per_iter: int
) -> Telemetry | None:
    runtime = params.runtime
    if not (runtime.dvclive or runtime.tensorboard):
        return None
    board = None
    if runtime.tensorboard:
        board = tensorboard_run(layout, run_name(params, layout.root), resumed_at is not None)
    return Telemetry(
        layout.live_partial if runtime.dvclive else None,
        board,
        every=runtime.log_every(steps_per_iter),
        resumed_at=resumed_at,
        params={"seed": layout.seed, **train_params(params)},
    )


def _resume(trainer: Trainer, curve: Curve, best: BestPolicy, layout: Layout) -> bool:
    """Continue an interrupted run of this configuration; discard progress of another.
    True if the run resumes."""
    path, dist = layout.resume_checkpoint, trainer.dist
    if not dist.broadcast_object(path.exists()):  # rank 0's file system decides
        return False
    try:
        saved = trainer.load(path)["pipeline"]
    except (CheckpointError, KeyError) as exc:
        if dist.is_main:
            print(f"[train] not resuming from {path} ({exc}); starting afresh", flush=True)
            path.unlink()
        return False
    curve.rows, curve.elapsed_before = list(saved["rows"]), float(saved["wall_s"])
    best.restore(saved.get("best"))
    if dist.is_main:
        print(
            f"[train] resuming from {path}: iteration {trainer.iteration}, "
            f"{trainer.env_steps:,d} env steps",
            flush=True,
        )
    return True


def run_training(
    trainer: Trainer,
    chunk_iters: int | None = None,
    after_chunk: Callable[[Trainer], None] | None = None,
) -> bool:
    """Train to the configured budget or stop target; True if the target was reached.

    `Trainer.run`, the one training loop, with `after_chunk` run after each `chunk_iters`
    iterations that did not finish the run (the stage saves resumable progress there);
    metrics go to the trainer's own sink as they are produced.
    """
    return trainer.run(every=chunk_iters, after=after_chunk).reached_target


def train(params: Params, layout: Layout | None = None) -> dict[str, float]:
    """Run the `train` stage for `layout.seed` (default: the first of `seeds`) and return
    the metrics it writes to `metrics/seeds/<seed>/train.json`.

    Under torchrun this process is one rank of the run (see `rlcore.distributed`)."""
    layout = layout or Layout(seed=params.seeds[0])
    configure_cpu(params.runtime.threads)
    cfg = params.experiment(seed=layout.seed)
    with process_group_from_env(cfg.env.device) as dist:
        curve = Curve(total_env_steps=0)
        runtime = params.runtime
        compiled, _ = runtime.compiles(cfg, dist.world_size)
        # Compiled runs read the device only where they log (see rlcore's Trainer.sync_every).
        sync_every = runtime.log_every(cfg.steps_per_iter) if compiled else 1
        trainer = Trainer(cfg, sink=curve, dist=dist, compile_loss=compiled, sync_every=sync_every)
        # One trainer per seed: a second one (a `dvc repro` beside another) stops here,
        # once the experiment is known to build, before it reads or writes anything.
        lock = run_lock(layout.train_lock, f"train of seed {layout.seed}")
        with lock if dist.is_main else contextlib.nullcontext():
            return _train(params, trainer, curve, layout)


def _train_metrics(
    trainer: Trainer, curve: Curve, best: BestPolicy, reached: bool
) -> dict[str, float]:
    """What `train.json` holds: the budget spent, the speed, the last and best evaluation."""
    wall_s = curve.wall_s
    last = curve.rows[-1] if curve.rows else {}
    metrics = {
        "env_steps": trainer.env_steps,
        "iterations": trainer.iteration,
        "processes": trainer.dist.world_size,
        "wall_s": round(wall_s, 3),
        "train_sps": round(trainer.env_steps / max(wall_s, 1e-9), 1),
        "reached_target": int(reached),
        "eval_return": last.get("eval_return", float("nan")),
    }
    if "eval_success_rate" in last:
        metrics["eval_success_rate"] = last["eval_success_rate"]
    if best.state is not None:  # what best.pt scored, and when
        metrics["best_eval_return"] = best.state["eval"]["eval/episode_return"]
        metrics["best_env_steps"] = best.state["env_steps"]
    return metrics


def _announce(params: Params, trainer: Trainer, curve: Curve, seed: int) -> None:
    """Say what is about to train, and start the progress line (rank 0)."""
    cfg, processes = trainer.cfg, trainer.dist.world_size
    per = f" per process x {processes} processes" if processes > 1 else ""
    print(
        f"[train] {params.name} seed {seed}: {cfg.env.name}, {cfg.env.num_envs} envs "
        f"x {cfg.trainer.num_steps} steps{per}, {trainer.total_iters} iterations = "
        f"{curve.total_env_steps:,d} env steps (ready in {startup_seconds():.1f} s)",
        flush=True,
    )
    stop = StopTarget(cfg.trainer.stop_at()) if cfg.trainer.stop_at() else None
    curve.progress = Progress(
        "train", curve.total_env_steps, "steps", initial=trainer.steps_done, stop=stop
    )
    for row in curve.rows:  # a resumed run's evaluations so far
        curve.progress.evaluated(int(row["env_steps"]), stop_values(row))
    compiled, why = params.runtime.compiles(cfg, processes)
    note = _compile_note(params.runtime.compile, compiled, why, trainer.collector.graphs_steps)
    if note:
        print(note, flush=True)


def _compile_note(setting: bool | str, compiled: bool, why: str, graphed: bool = False) -> str:
    """The line `_announce` prints about compiling ("" when eager was asked for); `graphed`:
    the collector replays its steps as a CUDA graph."""
    if not compiled:
        return f"[train] runtime.compile auto: eager ({why})" if setting == "auto" else ""
    said = f" auto ({why})" if setting == "auto" else ""
    graph = "; collection runs as one CUDA graph from the second rollout" if graphed else ""
    return f"[train] runtime.compile{said}: the first update compiles its steps{graph}"


def _train(params: Params, trainer: Trainer, curve: Curve, layout: Layout) -> dict[str, float]:
    cfg, main = trainer.cfg, trainer.dist.is_main
    curve.total_env_steps = trainer.total_iters * trainer.steps_per_iter
    # Checked before training: an output that cannot be written fails now, not at the end.
    targets = [
        layout.final_checkpoint, layout.best_checkpoint, layout.curve, layout.train_metrics,
        layout.provenance,
    ]  # fmt: skip
    live = [layout.live_metrics] if params.runtime.dvclive else []
    outputs = StagedOutputs(targets, directories=live) if main else None
    if main:
        remove_stale_temporaries(layout.resume_checkpoint)
    best = BestPolicy(trainer)
    resumed = _resume(trainer, curve, best, layout)
    resumed_at = trainer.steps_done if resumed else None
    telemetry = _telemetry(params, layout, resumed_at, trainer.steps_per_iter) if main else None
    trainer.sink = fan_out(curve, best, *([telemetry] if telemetry is not None else []))
    if main:
        _announce(params, trainer, curve, layout.seed)

    def save_progress(trainer: Trainer) -> None:
        progress = {**curve.state(), "best": best.progress()}
        trainer.save(layout.resume_checkpoint, extra={"pipeline": progress})

    try:
        reached = run_training(trainer, cfg.trainer.checkpoint_every_iters or None, save_progress)
    finally:
        if telemetry is not None:
            telemetry.close(trainer.steps_done)
        if curve.progress is not None:
            curve.progress.close()
    wall_s = curve.wall_s
    metrics = _train_metrics(trainer, curve, best, reached)
    if outputs is not None:  # rank 0: the checkpoint, curve and metrics, all or none
        with outputs:
            trainer.save(outputs.path(layout.final_checkpoint))
            if best.state is None:  # no evaluation in this process (resumed at the end)
                best(trainer.steps_done, {"eval/episode_return": metrics["eval_return"]})
            assert best.state is not None
            save_checkpoint(outputs.path(layout.best_checkpoint), best.state)
            outputs.write_csv(layout.curve, CURVE_COLUMNS, curve.rows)
            outputs.write_json(layout.train_metrics, metrics)
            # The machine that finished the run (a resumed run's last one).
            outputs.write_json(layout.provenance, provenance(cfg.env.device))
            if live:  # DVCLive's files of this run, published with the rest
                outputs.stage_directory(layout.live_metrics, layout.live_partial)
        layout.resume_checkpoint.unlink(missing_ok=True)
        print(f"[train] done in {wall_s:.1f}s: {metrics}", flush=True)
    else:
        trainer.save(layout.final_checkpoint)  # collective: rank 0 gathers, others send
    return metrics
