"""Every training iteration's metrics, in the tools users already watch: DVCLive and
TensorBoard. The train stage's metrics sink does this; rlcore knows neither.

DVCLive writes a TSV per metric under `plots/metrics/` and the latest values in
`metrics.json`, into the directory it is given: the train stage gives it
`outputs/seeds/S/live.partial/` and publishes that as `metrics/seeds/S/live/` with its other
outputs (`dvc.yaml` declares it as the stage's plots and metrics, for `dvc plots show` and
`dvc exp show`), so a failed run never replaces the last complete run's.
TensorBoard event files go to `outputs/tensorboard/<run>/seed_<S>/`, `<run>` being the
experiment and the params it changes (`pipelines.stages.run_name`: `astir-lore__algorithm.ppo.lr=
0.001`): `tensorboard --logdir outputs/tensorboard` shows every seed of every run. A run
never replaces an earlier one's events: a new run of the same name writes `<run>__run2/`
(then 3, ...) beside them; a resumed run continues the directory it was writing. Each run
also holds its params, as hparams (the HPARAMS tab, against `eval/*`) and as a table (TEXT).
The x axis of both is env steps.

`every` > 1 logs the mean of each metric over that many iterations (off-policy runs take
tens of thousands of short iterations); evaluations are logged as they come. A resumed run
drops what the interrupted one logged after its last checkpoint, so each step appears once.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.layout import Layout

Sink = Callable[[int, dict[str, float]], None]

# Metrics that describe an evaluation (logged at once, never averaged with others).
EVAL_PREFIX = "eval/"
# The metrics TensorBoard's hparams view sets beside each run's params.
EVAL_METRICS = ("eval/episode_return", "eval/success_rate")


class Telemetry:
    """The stage's metrics sink for DVCLive and TensorBoard (either may be off: None)."""

    def __init__(
        self,
        live_dir: Path | None,
        tensorboard_dir: Path | None,
        every: int = 1,
        resumed_at: int | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        """`params`: the run's, flat (`algorithm.ppo.lr`), shown in TensorBoard."""
        self.every = every
        self._pending: dict[str, list[float]] = defaultdict(list)
        self._iterations = 0
        self._live: Any = None
        self._writer: Any = None
        if live_dir is not None:
            self._live = _open_live(live_dir, resumed_at)
        if tensorboard_dir is not None:
            self._writer = _open_tensorboard(tensorboard_dir, resumed_at, params or {})

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


def tensorboard_run(layout: Layout, name: str, resumed: bool) -> Path:
    """This seed's TensorBoard directory for run `name`: after the latest one of that name
    (`name`, `name__run2`, ...), so earlier runs' events stay; the latest when resuming."""
    numbered = re.compile(re.escape(name) + r"(?:__run(\d+))?")
    runs = layout.tensorboard_runs
    taken = [
        int(match[1] or 1)
        for entry in (runs.iterdir() if runs.is_dir() else [])
        if (match := numbered.fullmatch(entry.name)) and layout.tensorboard(entry.name).exists()
    ]
    latest = max(taken, default=0)
    number = max(latest, 1) if resumed else latest + 1
    return layout.tensorboard(name if number == 1 else f"{name}__run{number}")


def _open_tensorboard(directory: Path, resumed_at: int | None, params: dict[str, Any]) -> Any:
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    if resumed_at is not None:
        # Events of the interrupted run past the checkpoint are purged from the view.
        return SummaryWriter(str(directory), purge_step=resumed_at + 1)
    writer = SummaryWriter(str(directory))
    if params:
        shown = {key: _hparam(value) for key, value in params.items()}
        # Written into this run (SummaryWriter.add_hparams would make a run of its own).
        for summary in hparams(shown, dict.fromkeys(EVAL_METRICS)):
            writer.file_writer.add_summary(summary)
        rows = "".join(f"| {key} | {value} |\n" for key, value in shown.items())
        writer.add_text("params", "| param | value |\n|---|---|\n" + rows)
    return writer


def _hparam(value: Any) -> bool | int | float | str:
    """TensorBoard's hparams take numbers, booleans and text: other values as JSON."""
    return value if isinstance(value, bool | int | float | str) else json.dumps(value)
