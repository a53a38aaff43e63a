"""Every training iteration's metrics, in the tools users already watch: DVCLive and
TensorBoard. The train stage's metrics sink does this; rlcore knows neither.

DVCLive writes a TSV per metric under `plots/metrics/` and the latest values in
`metrics.json`, into the directory it is given: the train stage gives it
`outputs/seeds/S/live.partial/` and publishes that as `metrics/seeds/S/live/` with its other
outputs (`dvc.yaml` declares it as the stage's plots and metrics, for `dvc plots show` and
`dvc exp show`), so a failed run never replaces the last complete run's.
TensorBoard event files go to `outputs/tensorboard/<experiment>/seed_<S>/` (the DVC
experiment's name under `dvc exp run`, else `params.yaml`'s `name`): `tensorboard --logdir
outputs/tensorboard` shows every seed of every experiment. The x axis of both is env steps.

`every` > 1 logs the mean of each metric over that many iterations (off-policy runs take
tens of thousands of short iterations); evaluations are logged as they come. A resumed run
drops what the interrupted one logged after its last checkpoint, so each step appears once.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

Sink = Callable[[int, dict[str, float]], None]

# Metrics that describe an evaluation (logged at once, never averaged with others).
EVAL_PREFIX = "eval/"


def experiment_label(default: str) -> str:
    """The DVC experiment being run (`dvc exp run` sets DVC_EXP_NAME), else `default`."""
    return os.environ.get("DVC_EXP_NAME") or default


class Telemetry:
    """The stage's metrics sink for DVCLive and TensorBoard (either may be off: None)."""

    def __init__(
        self,
        live_dir: Path | None,
        tensorboard_dir: Path | None,
        every: int = 1,
        resumed_at: int | None = None,
    ) -> None:
        self.every = every
        self._pending: dict[str, list[float]] = defaultdict(list)
        self._iterations = 0
        self._live: Any = None
        self._writer: Any = None
        if live_dir is not None:
            self._live = _open_live(live_dir, resumed_at)
        if tensorboard_dir is not None:
            self._writer = _open_tensorboard(tensorboard_dir, resumed_at)

    def __call__(self, env_steps: int, metrics: dict[str, float]) -> None:
        if any(name.startswith(EVAL_PREFIX) for name in metrics):
            self._log(env_steps, metrics)
            return
        for name, value in metrics.items():
            self._pending[name].append(float(value))
        self._iterations += 1
        if self._iterations % self.every == 0:
            self._flush(env_steps)

    def _flush(self, env_steps: int) -> None:
        if not self._pending:
            return
        means = {name: math.fsum(values) / len(values) for name, values in self._pending.items()}
        self._pending.clear()
        self._log(env_steps, means)

    def _log(self, env_steps: int, metrics: dict[str, float]) -> None:
        finite = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
        if self._live is not None:
            self._live.step = env_steps
            for name, value in finite.items():
                self._live.log_metric(name, value)
            self._live.next_step()  # writes the summary; DVC's live view follows it
        if self._writer is not None:
            for name, value in finite.items():
                self._writer.add_scalar(name, value, global_step=env_steps)

    def close(self, env_steps: int | None = None) -> None:
        """Log what is still pending (at `env_steps`) and close both writers."""
        if env_steps is not None:
            self._flush(env_steps)
        if self._live is not None:
            self._live.step = env_steps if env_steps is not None else self._live.step
            self._live.make_summary()
            self._live = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def fan_out(*sinks: Sink) -> Sink:
    """One sink that calls each of `sinks` in turn."""

    def sink(env_steps: int, metrics: dict[str, float]) -> None:
        for each in sinks:
            each(env_steps, metrics)

    return sink


def _open_live(directory: Path, resumed_at: int | None) -> Any:
    from dvclive import Live

    class FilesOnlyLive(Live):
        """DVCLive writing its files alone. The stage already runs inside DVC, whose
        dvc.yaml declares these files; DVCLive's own git handling would make experiments of
        its own, and fails outright in a repository without a commit (dvclive 3.49)."""

        def _init_dvc(self) -> None:
            self._save_dvc_exp = False

    if resumed_at is None:
        shutil.rmtree(directory, ignore_errors=True)  # a new run of this seed
    else:
        _drop_rows_after(directory / "plots" / "metrics", resumed_at)
        _drop_torn_summary(directory / "metrics.json")
    return FilesOnlyLive(
        str(directory), resume=resumed_at is not None, save_dvc_exp=False, dvcyaml=None
    )


def _drop_torn_summary(path: Path) -> None:
    """DVCLive reads its summary to resume; one a kill cut short mid-write is dropped (the
    next logged step writes it again) rather than failing the resumed run."""
    try:
        json.loads(path.read_text())
    except FileNotFoundError:
        pass
    except ValueError:
        path.unlink()


def _drop_rows_after(plots: Path, step: int) -> None:
    """Remove the rows an interrupted run logged after the checkpoint it resumes from, and
    a row a kill cut short."""
    for path in plots.rglob("*.tsv"):
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t"))
        if not rows:
            continue
        header, body = rows[0], rows[1:]
        column = header.index("step") if "step" in header else None
        if column is None:
            continue
        kept = [row for row in body if _step_of(row, column, len(header)) <= step]
        if len(kept) != len(body):
            with path.open("w", newline="") as handle:
                writer = csv.writer(handle, delimiter="\t")
                writer.writerows([header, *kept])


def _step_of(row: list[str], column: int, width: int) -> float:
    """The row's step; infinity (never kept) for a row cut short."""
    try:
        return float(row[column]) if len(row) == width else math.inf
    except ValueError:
        return math.inf


def _open_tensorboard(directory: Path, resumed_at: int | None) -> Any:
    from torch.utils.tensorboard import SummaryWriter

    if resumed_at is None:
        shutil.rmtree(directory, ignore_errors=True)  # a new run of this experiment and seed
        return SummaryWriter(str(directory))
    # Events of the interrupted run past the checkpoint are purged from the view.
    return SummaryWriter(str(directory), purge_step=resumed_at + 1)
