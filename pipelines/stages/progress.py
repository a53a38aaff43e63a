"""Progress of a long stage: a bar with rate and ETA on a terminal, a line every few
seconds in logs (DVC, Prefect and CI capture stdout: a redrawn bar would be noise there).

`Progress.update(done)` may be called as often as the work advances (every iteration);
it draws at most a few times a second. `note(text)` prints a line (an evaluation's result)
without breaking the bar.

A training run with a stop target (`trainer.stop_at_eval_return`, `..._success`) usually
ends long before its budget: given a `StopTarget` and each evaluation (`evaluated`), the ETA
is to the evaluation where the trend of the latest evaluations meets the nearest target,
with the budget's beside it: `ETA 0:17 to return -200 (budget 2:02)`. Before two
evaluations, while the trend is flat or heads away, or where it meets the target only past
the budget, the ETA is the budget's.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

# In logs: one line per this many seconds (and the first and last).
LOG_INTERVAL_S = 10.0
# How often the rate's (time, done) samples are kept.
SAMPLE_S = 1.0
# Evaluations the trend toward a stop target is fitted to: the latest few, so it follows
# the learning curve's present slope, not its start.
TREND_EVALS = 3

_STARTED = time.perf_counter()  # this module is imported as a stage starts


def startup_seconds() -> float:
    """Seconds since the stage's modules began loading (imports, validation, env build)."""
    return time.perf_counter() - _STARTED


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_rate(per_second: float, unit: str) -> str:
    """`3,300 steps/s`; slow work per minute or hour (`2.4 trials/h`), not `0 trials/s`."""
    for scale, per in ((1, "s"), (60, "min"), (3600, "h")):
        if per_second * scale >= 1 or per == "h":
            value = per_second * scale
            return f"{value:,.0f} {unit}/{per}" if value >= 10 else f"{value:.2g} {unit}/{per}"
    raise AssertionError("unreachable")


@dataclass
class StopTarget:
    """Where a run that stops early is expected to stop. `targets` are met when an
    evaluation's value reaches them (`{"return": -200.0}`: a return >= -200); each is
    extrapolated by the least-squares line through its latest `TREND_EVALS` values, to the
    first evaluation (at the spacing of the last two) at or past the crossing."""

    targets: dict[str, float]
    evaluations: list[int] = field(default_factory=list)  # the units done at each
    values: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def observe(self, done: int, values: Mapping[str, float]) -> None:
        """An evaluation at `done` units of work; non-finite values are left out."""
        self.evaluations.append(done)
        for name in self.targets:
            value = values.get(name, math.nan)
            if math.isfinite(value):
                self.values.setdefault(name, []).append((done, value))

    def expected(self, done: int, total: int) -> tuple[int, str] | None:
        """(units done at the evaluation expected to meet the nearest target, that target
        in words: "return -200"); None where no trend meets one before `total`."""
        if len(self.evaluations) < 2:
            return None
        last = self.evaluations[-1]
        interval = last - self.evaluations[-2]
        nearest: tuple[int, str] | None = None
        for name, target in self.targets.items():
            crossing = _crossing(self.values.get(name, [])[-TREND_EVALS:], target)
            if crossing is None or interval <= 0:
                continue
            # Rounding error must not push a crossing right at an evaluation one past it.
            evals = max(1, math.ceil((max(crossing, done) - last) / interval - 1e-9))
            at = last + evals * interval
            if at < total and (nearest is None or at < nearest[0]):
                nearest = (at, f"{name} {target:g}")
        return nearest


def _crossing(points: list[tuple[int, float]], target: float) -> float | None:
    """Where the least-squares line through `points` reaches `target`; None with fewer than
    two points or a slope that is not upward."""
    if len(points) < 2:
        return None
    mean_x = math.fsum(x for x, _ in points) / len(points)
    mean_y = math.fsum(y for _, y in points) / len(points)
    spread = math.fsum((x - mean_x) ** 2 for x, _ in points)
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_x + (target - mean_y) / slope if slope > 0 else None


class Progress:
    """`total` units of work (`unit`: "steps", "episodes", "frames", "trials") of `label`."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        initial: int = 0,
        stream: TextIO | None = None,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.perf_counter,
        stop: StopTarget | None = None,
    ) -> None:
        self.label, self.total, self.unit = label, max(total, 1), unit
        self.stop = stop
        self.stream = stream or sys.stdout
        self.interval_s, self.clock = interval_s, clock
        self.start, self.initial, self.done = clock(), initial, initial
        self._samples: deque[tuple[float, int]] = deque([(self.start, initial)])
        self._last_line = -float("inf")
        self._bar: Any = None
        if self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                initial=initial,
                unit=f" {unit}",
                unit_scale=self.total >= 10_000,  # 1.2M steps; 64/64 episodes
                desc=f"[{label}]",
                file=self.stream,
                dynamic_ncols=True,
                mininterval=0.25,
            )

    def rate(self) -> float:
        """Units per second over the later half of the time so far: work whose pace changes
        (SAC's fast warm-up of random steps, then an update per step) gets an ETA from its
        present pace, yet one evaluation's pause does not swing it. The whole run's average
        where nothing finished in that half (slow work such as trials)."""
        now = self.clock()
        elapsed = now - self.start
        if elapsed <= 0:
            return 0.0
        midpoint = now - elapsed / 2
        while len(self._samples) > 1 and self._samples[1][0] <= midpoint:
            self._samples.popleft()  # the midpoint only moves on: older samples are done with
        since, done_then = self._samples[0]
        if self.done > done_then and now > since:
            return (self.done - done_then) / (now - since)
        return (self.done - self.initial) / elapsed

    def update(self, done: int, **status: Any) -> None:
        """Work done so far (absolute), with `status` shown beside it (e.g. eval_return)."""
        advance, self.done = done - self.done, done
        now = self.clock()
        if now - self._samples[-1][0] >= SAMPLE_S:
            self._samples.append((now, done))
        if self._bar is not None:
            stop = self._stop_eta(self.rate()) if self.stop is not None else None
            if stop is not None:
                status = {**status, "ETA": f"{stop[0]} to {stop[1]}"}
            if status:
                self._bar.set_postfix(status, refresh=False)
            self._bar.update(advance)
            return
        if now - self._last_line >= self.interval_s or done >= self.total:
            self._last_line = now
            self.stream.write(self.line(status) + "\n")
            self.stream.flush()

    def evaluated(self, done: int, values: Mapping[str, float]) -> None:
        """An evaluation's values (`{"return": -350.0}`), for the ETA to a stop target."""
        if self.stop is not None:
            self.stop.observe(done, values)

    def line(self, status: dict[str, Any] | None = None) -> str:
        """`[train 0:42] 40,960/98,304 steps (42%), 3,300 steps/s, ETA 0:17, ...`, or
        `ETA 0:17 to return -200 (budget 2:02)` where a stop target is in reach."""
        rate = self.rate()
        eta = self._eta(self.total, rate)
        stop = self._stop_eta(rate)
        if stop is not None:
            eta = f"{stop[0]} to {stop[1]} (budget {eta})"
        shown = "".join(f", {k} {v}" for k, v in (status or {}).items())
        return (
            f"[{self.label} {_duration(self.clock() - self.start)}] "
            f"{self.done:,d}/{self.total:,d} {self.unit} ({self.done / self.total:.0%}), "
            f"{format_rate(rate, self.unit)}, ETA {eta}{shown}"
        )

    def _eta(self, upto: int, rate: float) -> str:
        return _duration((upto - self.done) / rate) if rate > 0 else "?"

    def _stop_eta(self, rate: float) -> tuple[str, str] | None:
        """(time to the expected stop, its target in words), or None."""
        expected = self.stop.expected(self.done, self.total) if self.stop is not None else None
        return None if expected is None else (self._eta(expected[0], rate), expected[1])

    def note(self, text: str) -> None:
        """A line of its own (a result), printed above the bar on a terminal."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
