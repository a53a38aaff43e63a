import io
import re

from pipelines.progress import Progress, format_rate


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_in_logs_a_line_every_interval_with_rate_and_eta():
    out = io.StringIO()
    progress = Progress("train", 1000, "steps", stream=out, interval_s=3600)
    for done in range(100, 1001, 100):
        progress.update(done, eval="12.5")
    progress.note("[train] an evaluation")
    progress.close()
    lines = out.getvalue().splitlines()
    # The first update and the last (done) only: the interval has not passed in between.
    assert len(lines) == 3, lines
    pattern = r"^\[train \d+:\d\d\] {done}/1,000 steps \({share}%\), [\d,]+ steps/s, ETA [\d:?]+"
    assert re.match(pattern.format(done=100, share=10), lines[0]), lines[0]
    assert re.match(pattern.format(done="1,000", share=100), lines[1]), lines[1]
    assert lines[0].endswith(", eval 12.5") and lines[2] == "[train] an evaluation"
    assert "\r" not in out.getvalue()  # no redrawn bar in a log


def test_every_update_is_a_line_when_the_interval_is_zero():
    out = io.StringIO()
    progress = Progress("collect", 4, "steps", stream=out, interval_s=0)
    for done in range(1, 5):
        progress.update(done)
    assert [line.split("] ")[1].split(" (")[0] for line in out.getvalue().splitlines()] == [
        "1/4 steps", "2/4 steps", "3/4 steps", "4/4 steps"
    ]  # fmt: skip


def test_on_a_terminal_a_bar_is_drawn_and_notes_print_above_it():
    out = Terminal()
    progress = Progress("evaluate", 64, "episodes", stream=out)
    progress.update(32)
    progress.note("a result")
    progress.update(64)
    progress.close()
    text = out.getvalue()
    assert "\r" in text and "[evaluate]" in text and "64/64" in text
    assert "a result\n" in text


def test_slow_work_shows_its_rate_per_minute_or_hour():
    assert format_rate(3300.4, "steps") == "3,300 steps/s"
    assert format_rate(2.5, "episodes") == "2.5 episodes/s"
    assert format_rate(0.05, "trials") == "3 trials/min"  # 3 a minute, not "0 trials/s"
    assert format_rate(1 / 1500, "trials") == "2.4 trials/h"
    assert format_rate(0.0, "trials") == "0 trials/h"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_eta_follows_the_present_pace_not_a_fast_start():
    # SAC-like: 10,000 random warm-up steps in 10 s, then 50 steps/s with an update each.
    clock, out = Clock(), io.StringIO()
    progress = Progress("train", 100_000, "steps", stream=out, interval_s=3600, clock=clock)
    done = 0
    for second in range(1, 611):
        clock.now = float(second)
        done += 1000 if second <= 10 else 50
        progress.update(done)
    assert done == 40_000
    # The whole run's average (40,000 in 610 s: 66 steps/s) would promise 15:15.
    assert progress.line().endswith("40,000/100,000 steps (40%), 50 steps/s, ETA 20:00")


def test_slow_work_with_nothing_finished_lately_keeps_the_whole_runs_rate():
    clock, out = Clock(), io.StringIO()
    progress = Progress("search", 4, "trials", stream=out, interval_s=3600, clock=clock)
    clock.now = 100.0
    progress.update(1)  # one trial in the first 100 s, none in the 300 s since
    for second in range(101, 401):
        clock.now = float(second)
        progress.update(1)
    assert progress.line().endswith("1/4 trials (25%), 9 trials/h, ETA 20:00")  # 1 in 400 s
