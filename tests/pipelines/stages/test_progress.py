import io
import re

from pipelines.stages.progress import Progress, StopTarget, format_rate


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


def run_with_evaluations(stop: StopTarget, returns: dict[int, float]) -> Progress:
    """1,000 steps a second for 30 s of a 100,000-step budget, evaluated at `returns`' steps."""
    clock, out = Clock(), io.StringIO()
    progress = Progress(
        "train", 100_000, "steps", stream=out, interval_s=3600, clock=clock, stop=stop
    )
    for second in range(1, 31):
        clock.now = float(second)
        progress.update(second * 1000)
        if second * 1000 in returns:
            progress.evaluated(second * 1000, {"return": returns[second * 1000]})
    return progress


def test_the_eta_is_to_the_evaluation_where_the_trend_meets_the_stop_target():
    # Returns -500, -400, -300 at 10k, 20k, 30k steps: slope 100 per 10k steps; the line
    # through their mean (20k, -400) meets -200 at 20k + 200 / 0.01 = 40k, the next
    # evaluation (every 10k). 10k steps at 1,000/s: 0:10; the budget's 70k: 1:10.
    progress = run_with_evaluations(
        StopTarget({"return": -200.0}), {10_000: -500.0, 20_000: -400.0, 30_000: -300.0}
    )
    assert progress.line().endswith("1,000 steps/s, ETA 0:10 to return -200 (budget 1:10)")


def test_the_trend_is_fitted_to_the_latest_evaluations_and_met_at_an_evaluation():
    # Only the last 3 of 4 count (the -2,000 start would steepen the line). -500, -300,
    # -400 at 10k-30k: slope (-10k * -100 + 0 + 10k * 0) / (2 * 10k^2) = 0.005 per step;
    # from the mean (20k, -400) to -200: 40k steps, so 60k: 3 evaluations on, 30k steps, 0:30.
    stop = StopTarget({"return": -200.0})
    progress = run_with_evaluations(
        stop, {1_000: -2000.0, 10_000: -500.0, 20_000: -300.0, 30_000: -400.0}
    )
    assert stop.expected(30_000, 100_000) == (60_000, "return -200")
    assert progress.line().endswith("ETA 0:30 to return -200 (budget 1:10)")
    # A line that meets the target before the latest evaluation: the next one is expected.
    assert StopTarget({"return": -450.0}, [10_000, 20_000, 30_000], stop.values).expected(
        30_000, 100_000
    ) == (40_000, "return -450")


def test_the_nearest_of_two_targets_is_shown():
    # Success 0.5, 0.6, 0.7: from (20k, 0.6) at 1e-5 per step, 0.9 at 50k; return -200 at 40k.
    stop = StopTarget({"return": -200.0, "success": 0.9})
    for steps, ret, success in (
        (10_000, -500.0, 0.5),
        (20_000, -400.0, 0.6),
        (30_000, -300.0, 0.7),
    ):
        stop.observe(steps, {"return": ret, "success": success})
    assert stop.expected(30_000, 100_000) == (40_000, "return -200")
    stop.targets["return"] = 0.0  # now at 20k + 400 / 0.01 = 60k: success is nearer
    assert stop.expected(30_000, 100_000) == (50_000, "success 0.9")


def test_without_a_trend_toward_the_target_in_the_budget_the_eta_is_the_budgets():
    budget = "1,000 steps/s, ETA 1:10"
    one = run_with_evaluations(StopTarget({"return": -200.0}), {30_000: -300.0})
    assert one.line().endswith(budget)
    away = {10_000: -300.0, 20_000: -400.0, 30_000: -500.0}
    assert run_with_evaluations(StopTarget({"return": -200.0}), away).line().endswith(budget)
    flat = {10_000: -300.0, 20_000: -300.0}
    assert run_with_evaluations(StopTarget({"return": -200.0}), flat).line().endswith(budget)
    # -1,000, -990, -980: 0.001 per step, -200 only 790k steps on, past the budget.
    slow = {10_000: -1000.0, 20_000: -990.0, 30_000: -980.0}
    assert run_with_evaluations(StopTarget({"return": -200.0}), slow).line().endswith(budget)
    # An env without success: its NaNs are no trend.
    nan = {10_000: float("nan"), 20_000: float("nan")}
    assert run_with_evaluations(StopTarget({"return": -200.0}), nan).line().endswith(budget)
