"""`python -m pipelines compare [RUN ...]`: experiments side by side, in pages people read.

RUN is a DVC experiment name, a git revision (commit, branch, tag) or `workspace`; by
default: the HEAD commit, every DVC experiment based on it, and the workspace (unless it
equals one of them). Writes

- `reports/compare.md`, with figures in `reports/compare/`;
- `reports/compare.html`, self-contained (figures inlined; opens offline, anywhere);
- `reports/compare/media/`: each run's video and search summary, where the run has them.

Both pages hold a table of the parameters that differ between runs and each run's final
metrics (mean ± sample std over its seeds), learning curves (evaluation return against env
steps and against wall time; one colour per run, its seeds as a band from min to max), and
every problem found (a missing or malformed file is listed; the rest still renders).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import html
import json
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.compare.aggregate import (
    CARRIED,
    FINAL_METRICS,
    Band,
    FinalMetric,
    band,
    summarize,
    where_trained,
)
from pipelines.compare.plots import plot_bands
from pipelines.compare.runs import Run, RunSelectionError, load_runs, select_sources
from pipelines.files import write_text
from pipelines.layout import Layout


@dataclass(frozen=True)
class Figure:
    file: str
    title: str
    x_key: str
    y_key: str
    xlabel: str
    ylabel: str


FIGURES = (
    Figure("return_vs_steps.png", "Evaluation return", "env_steps", "eval_return", "env steps",
           "episode return"),
    Figure("return_vs_wall.png", "Evaluation return against wall time", "wall_s", "eval_return",
           "training wall time (s)", "episode return"),
    Figure("success_vs_steps.png", "Success rate", "env_steps", "eval_success_rate", "env steps",
           "success rate"),
)  # fmt: skip


@dataclass
class Page:
    """Everything both pages show, computed once."""

    runs: list[Run]
    param_keys: list[str]
    metrics: list[FinalMetric]
    figures: list[tuple[Figure, Path]]
    media: dict[str, dict[str, str]]  # run label -> {"video": path, "search": path}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`; lists stay values."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
    return out


# Sections no stage of the experiment reads: a run's result does not depend on them, and an
# experiment carrying its own study's space would otherwise fill the table with its keys.
NOT_COMPARED = ("search", "schedule")


def differing_params(runs: Sequence[Run]) -> list[str]:
    """Dotted keys whose value is not the same in every run that has params (the sections
    in `NOT_COMPARED` left out)."""
    flats = [
        {k: v for k, v in flatten(run.params).items() if k.split(".")[0] not in NOT_COMPARED}
        for run in runs
        if run.params is not None
    ]
    if len(flats) < 2:
        return []
    keys = sorted(set().union(*flats))
    missing = object()
    return [k for k in keys if len({json.dumps(f.get(k, missing), default=str) for f in flats}) > 1]


def show_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return "-" if value is None else str(value)


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "run"


def unique_labels(runs: list[Run]) -> None:
    """Give runs that share a label (the same revision asked for twice) distinct ones."""
    seen: dict[str, int] = {}
    for run in runs:
        count = seen.get(run.label, 0)
        seen[run.label] = count + 1
        if count:
            run.source = dataclasses.replace(run.source, label=f"{run.label} ({count + 1})")


def seeds_cell(run: Run) -> str:
    complete = sum(s.complete for s in run.seeds)
    if not run.seeds:
        return "-"
    return str(complete) if complete == len(run.seeds) else f"{complete} of {len(run.seeds)}"


def metric_cell(run: Run, metric: FinalMetric) -> str:
    stat = summarize(run.seeds).get(metric.key)
    return "-" if stat is None else stat.format(metric.spec)


def problems_of(run: Run) -> list[str]:
    return [*run.problems, *(p for seed in run.seeds for p in seed.problems)]


def build_page(runs: list[Run], layout: Layout) -> Page:
    """Figures and media files of the comparison; the numbers stay in `runs`."""
    unique_labels(runs)
    stats = [summarize(run.seeds) for run in runs]
    metrics = [m for m in FINAL_METRICS if any(m.key in s for s in stats)]
    figures = []
    for figure in FIGURES:
        series: list[tuple[str, Band]] = []
        for run in runs:
            curve = band([s.curve for s in run.seeds if s.curve], figure.x_key, figure.y_key)
            if curve is not None:
                series.append((run.label, curve))
        if figure.y_key == "eval_success_rate" and not series:
            continue  # no run reports success
        path = layout.compare_dir / figure.file
        plot_bands(series, path, figure.title, figure.xlabel, figure.ylabel)
        figures.append((figure, path))
    media_dir = layout.compare_dir / "media"
    if media_dir.exists():
        shutil.rmtree(media_dir)  # media of runs no longer compared
    media: dict[str, dict[str, str]] = {}
    for run in runs:
        links = media.setdefault(run.label, {})
        if run.video is not None:
            target = media_dir / f"{slug(run.label)}.mp4"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run.video, target)
            links["video"] = target.relative_to(layout.root / "reports").as_posix()
        if run.search_summary is not None:
            target = media_dir / f"{slug(run.label)}-search.md"
            write_text(target, run.search_summary)
            links["search"] = target.relative_to(layout.root / "reports").as_posix()
    return Page(runs, differing_params(runs), metrics, figures, media)


def _rows(page: Page) -> tuple[list[str], list[list[str]]]:
    """The runs table (plain text cells): run, revision, name, seeds, params, metrics, links."""
    header = ["run", "revision", "experiment", "seeds", *page.param_keys]
    header += [m.label for m in page.metrics]
    rows = []
    for run in page.runs:
        flat = flatten(run.params) if run.params is not None else {}
        rev = "-" if run.source.rev is None else run.source.rev[:7]
        cells = [run.label, rev, run.name or "-", seeds_cell(run)]
        cells += [show_value(flat.get(k)) for k in page.param_keys]
        cells += [metric_cell(run, m) for m in page.metrics]
        rows.append(cells)
    return header, rows


NO_MEDIA = "no video or search"
MACHINES_NOTE = (
    "The runs were trained on different machines or package releases: single runs differ "
    "there even with equal parameters (docs/guide.md, *What repeats exactly*)."
)


def machines(page: Page) -> list[tuple[str, str]]:
    """(run label, where its seeds were trained), when the runs were not all trained on one
    kind of machine with the same releases; empty otherwise."""
    described = [(run.label, where_trained(run.seeds) or "not recorded") for run in page.runs]
    recorded = {where for _, where in described if where != "not recorded"}
    return described if len(recorded) > 1 else []


def media_links(page: Page, run: Run) -> list[tuple[str, str]]:
    """(text, href relative to reports/) of the run's video and search summary, if any."""
    links = page.media.get(run.label, {})
    names = {"video": "video", "search": "search summary"}
    return [(text, links[kind]) for kind, text in names.items() if kind in links]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(page: Page, layout: Layout) -> str:
    header, rows = _rows(page)
    lines = [
        "# Comparison",
        "",
        f"{len(page.runs)} runs. Final metrics are the mean ± sample std over each run's "
        "complete seeds (evaluation return: the `evaluate` stage's held-out episodes). "
        + (
            "Parameters that differ between the runs are shown (outside search and schedule, "
            "which no stage of the experiment reads); all others are equal."
            if page.param_keys
            else "The runs' parameters are identical."
        ),
        "",
        "| " + " | ".join(_md_cell(h) for h in header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows),
        "",
        "## Learning curves",
        "",
        f"Each run's mean over its seeds; the band spans its seeds (min to max); {CARRIED}.",
        "",
    ]
    for figure, path in page.figures:
        lines += [f"![{figure.title}]({path.relative_to(layout.root / 'reports').as_posix()})", ""]
    media_lines = []
    for run in page.runs:
        parts = [f"[{text}]({href})" for text, href in media_links(page, run)]
        media_lines.append(f"- {run.label}: {', '.join(parts) or NO_MEDIA}")
    lines += ["## Videos and searches", "", *media_lines, ""]
    trained_on = machines(page)
    if trained_on:
        lines += ["## Where the runs were trained", "", MACHINES_NOTE, ""]
        lines += [f"- {label}: {where}" for label, where in trained_on] + [""]
    problems = [(run.label, p) for run in page.runs for p in problems_of(run)]
    lines += ["## Problems", ""]
    lines += [f"- {label}: {problem}" for label, problem in problems] or ["None."]
    return "\n".join(lines) + "\n"


_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222 }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top }
th { background: #f3f3f3 } td.num { text-align: right; font-variant-numeric: tabular-nums }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0 }
.problem { color: #a40000 } pre { background: #f7f7f7; padding: 8px; overflow-x: auto }
"""


def render_html(page: Page) -> str:
    """One self-contained page: figures inlined as data URIs, no scripts, no network."""
    esc = html.escape
    header, rows = _rows(page)
    first_metric = len(header) - len(page.metrics)
    table = ["<table>", "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        cells = [
            f'<td class="num">{esc(c)}</td>' if i >= first_metric else f"<td>{esc(c)}</td>"
            for i, c in enumerate(row)
        ]
        table.append("<tr>" + "".join(cells) + "</tr>")
    table.append("</table>")
    figures = []
    for figure, path in page.figures:
        data = base64.b64encode(path.read_bytes()).decode()
        figures.append(f'<img alt="{esc(figure.title)}" src="data:image/png;base64,{data}">')
    media = []
    for run in page.runs:
        parts = [f'<a href="{esc(href)}">{text}</a>' for text, href in media_links(page, run)]
        item = f"<li>{esc(run.label)}: {', '.join(parts) or NO_MEDIA}"
        if run.search_summary is not None:
            item += (
                f"<details><summary>search</summary><pre>{esc(run.search_summary)}</pre></details>"
            )
        media.append(item + "</li>")
    trained_on = "".join(f"<li>{esc(label)}: {esc(where)}</li>" for label, where in machines(page))
    if trained_on:
        heading = "<h2>Where the runs were trained</h2>"
        trained_on = f"{heading}\n<p>{esc(MACHINES_NOTE)}</p>\n<ul>{trained_on}</ul>"
    problems = [
        f'<li class="problem">{esc(run.label)}: {esc(p)}</li>'
        for run in page.runs
        for p in problems_of(run)
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Comparison</title>
<style>{_CSS}</style></head><body>
<h1>Comparison</h1>
<p>{len(page.runs)} runs. Final metrics are the mean &plusmn; sample std over each run's complete
seeds. {
        "Parameters that differ between the runs are shown (outside search and schedule, "
        "which no stage of the experiment reads); all others are equal."
        if page.param_keys
        else "The runs' parameters are identical."
    }</p>
{"".join(table)}
<h2>Learning curves</h2>
<p>Each run's mean over its seeds; the band spans its seeds (min to max); {CARRIED}.</p>
{"".join(figures)}
<h2>Videos and searches</h2>
<ul>{"".join(media)}</ul>
{trained_on}
<h2>Problems</h2>
{"<ul>" + "".join(problems) + "</ul>" if problems else "<p>None.</p>"}
</body></html>
"""


def compare(root: Path, requested: Sequence[str] = ()) -> Page:
    """Gather the runs, write both pages and their files; return what was shown."""
    layout = Layout(root)
    sources = select_sources(root, list(requested))
    runs = load_runs(root, sources, drop_same_workspace=not requested)
    page = build_page(runs, layout)
    write_text(layout.compare_report, render_markdown(page, layout))
    write_text(layout.compare_html, render_html(page))
    return page


def compare_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "runs", nargs="*", metavar="RUN", help="experiment name, git rev, workspace"
    )
    parser.add_argument("--project-dir", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        page = compare(args.project_dir, args.runs)
    except RunSelectionError as exc:
        print(f"error: compare: {exc}", file=sys.stderr)
        return 2
    layout = Layout(args.project_dir)
    problems = sum(len(problems_of(run)) for run in page.runs)
    print(
        f"[compare] {len(page.runs)} runs, {len(page.param_keys)} differing params, "
        f"{problems} problems, in {time.perf_counter() - start:.1f}s: "
        f"{layout.compare_report} and {layout.compare_html}",
        flush=True,
    )
    return 0
