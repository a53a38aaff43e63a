"""Progress of a long stage: a bar with rate and ETA on a terminal, a line every few
seconds in logs (DVC, Prefect and CI capture stdout: a redrawn bar would be noise there).

`Progress.update(done)` may be called as often as the work advances (every iteration);
it draws at most a few times a second. `note(text)` prints a line (an evaluation's result)
without breaking the bar.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

# In logs: one line per this many seconds (and the first and last).
LOG_INTERVAL_S = 10.0
# How often the rate's (time, done) samples are kept.
SAMPLE_S = 1.0

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
    ) -> None:
        self.label, self.total, self.unit = label, max(total, 1), unit
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
            if status:
                self._bar.set_postfix(status, refresh=False)
            self._bar.update(advance)
            return
        if now - self._last_line >= self.interval_s or done >= self.total:
            self._last_line = now
            self.stream.write(self.line(status) + "\n")
            self.stream.flush()

    def line(self, status: dict[str, Any] | None = None) -> str:
        """`[train 0:42] 40,960/98,304 steps (42%), 3,300 steps/s, ETA 0:17, ...`."""
        rate = self.rate()
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = _duration(left) if left == left else "?"
        shown = "".join(f", {k} {v}" for k, v in (status or {}).items())
        return (
            f"[{self.label} {_duration(self.clock() - self.start)}] "
            f"{self.done:,d}/{self.total:,d} {self.unit} ({self.done / self.total:.0%}), "
            f"{format_rate(rate, self.unit)}, ETA {eta}{shown}"
        )

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
