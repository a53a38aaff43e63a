"""The `report` stage: a Markdown page of the experiment over all its seeds, with its
learning curve (mean and range over seeds) as a PNG, and `metrics/summary.json`."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from pipelines.compare.aggregate import (
    CARRIED,
    FINAL_METRICS,
    SeedRun,
    band,
    load_seeds,
    summarize,
    summary_json,
    where_trained,
    workspace_reader,
)
from pipelines.compare.plots import plot_bands
from pipelines.files import StagedOutputs
from pipelines.layout import Layout
from pipelines.params import Params
from rlcore.algos.registry import reported_settings


class SeedResultsError(ValueError):
    """A seed's result file is malformed (missing ones raise FileNotFoundError)."""


def algorithm_line(params: Params) -> str:
    """The algorithm's name, with the summary its config declares (if any)."""
    summary = reported_settings(params.algorithm.config).summary
    name = params.algorithm.section.upper()
    return f"{name} ({summary})" if summary is not None else name


def _optimizer_line(params: Params) -> str:
    """The settings most runs are compared by, as the algorithm's config declares them."""
    return ", ".join(reported_settings(params.algorithm.config).optimizer)


def seeds_table(seeds: Sequence[SeedRun]) -> str:
    """One row per seed and a mean ± std row, for the final metrics any seed reports."""
    stats = summarize(seeds)
    metrics = [m for m in FINAL_METRICS if m.key in stats]
    lines = [
        "| seed | " + " | ".join(m.label for m in metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for run in seeds:
        cells = []
        for m in metrics:
            value = run.final(m)
            cells.append("-" if value is None else format(value, m.spec))
        lines.append(f"| {run.seed} | " + " | ".join(cells) + " |")
    if len(seeds) > 1:
        lines.append(
            "| **mean ± std** | " + " | ".join(stats[m.key].format(m.spec) for m in metrics) + " |"
        )
    return "\n".join(lines)


def provenance_paragraph(seeds: Sequence[SeedRun]) -> str:
    """Where the seeds were trained, one line when they share a machine (empty for runs
    made before this was recorded)."""
    where = where_trained(seeds)
    if where is None:
        return ""
    return (
        f"\nTrained on {where}. A run repeats exactly only on the same kind of CPU with the same "
        "releases (docs/guide.md, *What repeats exactly*).\n"
    )


def render_report(params: Params, layout: Layout, seeds: Sequence[SeedRun]) -> str:
    """The page's Markdown (the curve PNG must be written beside it)."""
    env, trainer = params.env, params.trainer
    stats = summarize(seeds)
    ret = stats["eval_return"]
    over = f"over {ret.count} seeds (sample std)" if ret.count > 1 else "on one seed"
    success = stats.get("success_rate")
    success_line = "" if success is None else f" Success rate {success.format('.2f')}."
    video = os.path.relpath(layout.video, layout.report_dir)
    episodes = seeds[0].evaluation["episodes"] if seeds[0].evaluation else "?"
    return f"""# {params.name}

{algorithm_line(params)} on `{env.name}`: {env.num_envs} envs x {trainer.num_steps} steps
per rollout, {_budget(params)}, seeds {list(params.seeds)}; policy
{list(params.policy.hidden_sizes)} {params.policy.activation}; {_optimizer_line(params)}.

## Evaluation

{episodes} deterministic episodes per seed on evaluation seed {params.evaluation.seed} (never
used in training): return **{ret.format(".2f")}** {over}.{success_line}

{seeds_table(seeds)}
{provenance_paragraph(seeds)}
## Training

![learning curve]({layout.curve_png.name})

Evaluation {_curve_metric(seeds)[1]} during training: the line is the mean over seeds, the band
their range; {CARRIED}.

## Video

[{params.video.episodes} evaluation episodes]({video}) of the policy trained on
seed {params.seeds[0]}. Not in your workspace (a fresh clone)? `dvc repro video` makes it again;
`dvc pull dvc.yaml` fetches it where a DVC remote holds it (docs/guide.md, *Sharing results*).
"""


def _budget(params: Params) -> str:
    """The env steps training runs: whole iterations, as the trainer rounds the budget."""
    trainer, env = params.trainer, params.env
    per_iteration = env.num_envs * trainer.num_steps * params.runtime.processes
    iterations = max(trainer.total_env_steps // per_iteration, 1)
    budget = iterations * per_iteration
    rounded = (
        f"; trainer.total_env_steps {trainer.total_env_steps:,} rounded to whole iterations"
        if budget != trainer.total_env_steps
        else ""
    )
    targets = trainer.stop_targets()
    stop = f", stopping early at {targets}" if targets else ""
    return f"{budget:,} env steps budget ({iterations:,} iterations{rounded}){stop}"


def _curve_metric(seeds: list[SeedRun]) -> tuple[str, str]:
    """What the learning curve shows: success rate where the env reports it, else return."""
    rows = [row for run in seeds for row in run.curve or []]
    if any(not math.isnan(row.get("eval_success_rate", math.nan)) for row in rows):
        return "eval_success_rate", "success rate"
    return "eval_return", "return"


def _checked(seeds: list[SeedRun]) -> list[SeedRun]:
    """The report stage runs after every seed's stages: any gap is an error, not a footnote."""
    for run in seeds:
        if run.missing:
            raise FileNotFoundError(run.missing[0])
        if run.problems:
            raise SeedResultsError(run.problems[0])
    return seeds


def report(params: Params, layout: Layout | None = None) -> Path:
    """Write `reports/run/report.md`, `reports/run/curve.png` and `metrics/summary.json`."""
    layout = layout or Layout()
    outputs = StagedOutputs([layout.curve_png, layout.summary_metrics, layout.report])
    seeds = _checked(load_seeds(workspace_reader(layout.root), Layout(), params.seeds))
    text = render_report(params, layout, seeds)
    key, label = _curve_metric(seeds)
    curve = band([run.curve or [] for run in seeds], "env_steps", key)
    with outputs:
        plot_bands(
            [] if curve is None else [(params.name, curve)],
            outputs.path(layout.curve_png),
            f"{params.name}: evaluation {label} during training",
            "env steps",
            "success rate" if key == "eval_success_rate" else "episode return",
        )
        outputs.write_json(layout.summary_metrics, summary_json(seeds))
        outputs.write_text(layout.report, text)
    print(f"[report] wrote {layout.report} ({len(seeds)} seeds)", flush=True)
    return layout.report
