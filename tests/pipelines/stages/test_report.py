"""The `report` stage: the budget line, Markdown that renders as meant, the curve's metric."""

from pipelines.layout import Layout
from pipelines.params import parse_params
from tests.pipelines.stages.tiny_experiment import TINY


def test_the_report_says_the_budget_training_runs_in_whole_iterations():
    from pipelines.stages.report import _budget

    rounded = parse_params({**TINY, "trainer": {**TINY["trainer"], "total_env_steps": 1000}})
    assert _budget(rounded) == (
        "896 env steps budget (7 iterations; trainer.total_env_steps 1,000 rounded to whole "
        "iterations)"
    )
    stopping = parse_params(
        {**TINY, "env": {"name": "push_cube", "num_envs": 8}, "trainer": {
            **TINY["trainer"], "stop_at_eval_return": -10.0, "stop_at_eval_success": 0.9}}
    )  # fmt: skip
    assert _budget(stopping).endswith(
        "(6 iterations), stopping early at evaluation return >= -10 or evaluation success >= 0.9"
    )


def test_no_value_in_the_report_starts_a_line_where_it_would_read_as_markup():
    """A wrapped line that starts with `1.` is an ordered list in CommonMark and GitHub's
    Markdown (the video paragraph once ended a line before its seed: seed 1 made a list)."""
    from markdown_it import MarkdownIt

    from pipelines.compare.aggregate import SeedRun
    from pipelines.stages.report import render_report

    params = parse_params({**TINY, "seeds": [1]})
    seed = SeedRun(1, train={"env_steps": 768.0}, evaluation={"return_mean": 9.0, "episodes": 5})
    text = render_report(params, Layout(), [seed])
    blocks = {token.type for token in MarkdownIt("commonmark").parse(text)}
    assert "ordered_list_open" not in blocks and "bullet_list_open" not in blocks


def test_the_curve_shows_success_where_the_env_reports_it():
    from pipelines.compare.aggregate import SeedRun
    from pipelines.stages.report import _curve_metric

    nan = float("nan")
    cartpole = [{"env_steps": 1.0, "eval_return": 9.0, "eval_success_rate": nan}]
    push_cube = [{"env_steps": 1.0, "eval_return": -50.0, "eval_success_rate": 0.25}]
    assert _curve_metric([SeedRun(0, curve=cartpole)]) == ("eval_return", "return")
    assert _curve_metric([SeedRun(0, curve=[{"env_steps": 1.0, "eval_return": 9.0}])])[1] == (
        "return"
    )
    assert _curve_metric([SeedRun(0, curve=push_cube)]) == ("eval_success_rate", "success rate")
