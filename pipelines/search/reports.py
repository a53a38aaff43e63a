"""The study's reports, written when a search ends (also after a Ctrl-C or a lost worker):
`best_params.yaml` (the best trial as a params.yaml fragment), `trials.csv`, `summary.md`
and Optuna's plots as PNG in `reports/search/`, the same plots as self-contained HTML in
`outputs/search/html/`; for a params file other than the project's, the same beside them
under the study's name (`reports/search-<study_name>/`, ...: `Layout.for_search_params`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from pipelines.files import atomic_path, write_text
from pipelines.layout import Layout
from pipelines.params import Params, set_path
from pipelines.search.recovery import stopped_trials
from pipelines.search.sampling import trial_values
from pipelines.search.space import SearchParams, search_section
from pipelines.search.trials import (
    MACHINE,
    TASK_SCORE,
    WORKER,
    replaced_trials,
    retry_of,
    started_trials,
    trial_seconds,
)

PLOTS = ("optimization_history", "param_importances", "intermediate_values")


def best_params_document(trial: FrozenTrial, params: Params) -> dict[str, Any]:
    """The best trial's values as a params.yaml fragment (nested mapping)."""
    fragment: dict[str, Any] = {}
    for path, value in trial_values(trial, search_section(params).space).items():
        set_path(fragment, path, value)
    return fragment


def write_reports(study: optuna.Study, params: Params, layout: Layout) -> dict[str, Any]:
    """best_params.yaml, trials.csv, plots and summary.md; returns the study's metrics."""
    search = search_section(params)
    trials = study.get_trials(deepcopy=False)
    replaced = replaced_trials(trials)  # failed trials a retry ran again: they count through it
    counted = [t for t in trials if t.number not in replaced]
    counts = {s.name.lower(): sum(t.state == s for t in counted) for s in TrialState}
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    summary: dict[str, Any] = {
        "trials": len(started_trials(study)),
        **counts,
        "retried": len(replaced),
    }
    out = layout.search_reports
    out.mkdir(parents=True, exist_ok=True)
    _write_trials_csv(trials, search, out / "trials.csv")
    best = study.best_trial if complete else None
    if best is not None:
        fragment = best_params_document(best, params)
        header = (
            f"# Best trial {best.number} of study {search.study_name!r}: "
            f"{search.objective} {best.value:.4g}.\n# Merge into params.yaml, or run it with "
            f"`dvc exp run dvc.yaml {' '.join(_set_flags(best, params))}`.\n"
        )
        write_text(out / "best_params.yaml", header + yaml.safe_dump(fragment, sort_keys=False))
        summary |= {"best_value": best.value, "best_trial": best.number}
    plots = _write_plots(study, out, layout.search_html)
    html = os.path.relpath(layout.search_html, out)
    own_file = bool(layout.search_name)
    summary_md = _summary_markdown(study, params, best, summary, plots, html, own_file)
    write_text(out / "summary.md", summary_md)
    return summary


def _set_flags(trial: FrozenTrial, params: Params) -> list[str]:
    return [
        f"-S '++{path}={json.dumps(value)}'"
        for path, value in trial_values(trial, search_section(params).space).items()
    ]


def _write_trials_csv(trials: list[FrozenTrial], search: SearchParams, path: Path) -> None:
    scores = [f"{TASK_SCORE}{task.env}" for task in search.tasks]
    columns = [
        "number", "state", "value", *scores, *search.space, "evaluations", "duration_s",
        "worker", "retry_of", "machine",
    ]  # fmt: skip
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns)
    writer.writeheader()
    for t in trials:
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "value": t.value,
            "evaluations": len(t.intermediate_values),
            "duration_s": None if (wall := trial_seconds(t)) is None else round(wall, 3),
            "worker": t.user_attrs.get(WORKER),  # host:pid
            "retry_of": retry_of(t),
            "machine": t.user_attrs.get(MACHINE),
        }
        row |= {score: t.user_attrs.get(score) for score in scores}
        row |= {k: json.dumps(v) for k, v in trial_values(t, search.space).items()}
        writer.writerow(row)
    write_text(path, buffer.getvalue())


def _write_plots(study: optuna.Study, out: Path, html_dir: Path) -> list[str]:
    """Each plot Optuna can draw for this study, as PNG and self-contained HTML."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    html_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in PLOTS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
            try:
                figure = getattr(optuna.visualization, f"plot_{name}")(study)
                axes = getattr(optuna.visualization.matplotlib, f"plot_{name}")(study)
            except (ValueError, RuntimeError) as exc:  # e.g. importances need 2+ trials
                print(f"[search] no {name} plot: {exc}", flush=True)
                continue
        with atomic_path(html_dir / f"{name}.html") as tmp:
            figure.write_html(str(tmp), include_plotlyjs=True, full_html=True)
        fig = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        fig.set_size_inches(8, 4.5)
        fig.tight_layout()
        with atomic_path(out / f"{name}.png") as tmp:
            fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)
        written.append(name)
    return written


def _objective_words(search: SearchParams) -> str:
    words = (
        f"final evaluation {search.objective}"
        if search.objective_evals == 1
        else f"{search.objective}, mean of the last {search.objective_evals} evaluations"
    )
    if search.tasks:
        names = ", ".join(task.env for task in search.tasks)
        words = f"mean over {len(search.tasks)} tasks ({names}) of the normalised {words}"
    return words


def _summary_markdown(
    study: optuna.Study,
    params: Params,
    best: FrozenTrial | None,
    summary: dict[str, Any],
    plots: list[str],
    html: str,
    own_file: bool = False,
) -> str:
    """`own_file`: the study ran from a params file other than the project's params.yaml."""
    search = search_section(params)
    counts = {state.name.lower(): summary[state.name.lower()] for state in TrialState}
    lines = [
        f"# Search: {search.study_name}",
        "",
        f"{search.sampler.upper()} sampler (seed {search.seed}), {search.pruner} pruner; "
        f"objective: {search.direction} {_objective_words(search)} "
        f"(mean over {search.seeds_per_trial} seed(s)).",
        "",
        "Trials: "
        + ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        + f" ({summary['trials']} of `n_trials` {search.n_trials})"
        + "".join(f"; {note}" for note in _trial_notes(study, search, summary))
        + ".",
        "",
    ]
    if best is not None:
        lines += _best_lines(best, params, own_file)
    lines += _ranked_lines(study, search)
    for name in plots:
        lines += [f"![{name}]({name}.png) ([interactive]({html}/{name}.html))", ""]
    return "\n".join(lines)


def _trial_notes(study: optuna.Study, search: SearchParams, summary: dict[str, Any]) -> list[str]:
    """What the summary's line of trial counts adds: stopped and retried trials, and
    trials that ran on several kinds of machine."""
    stopped = [t.number for t in stopped_trials(study.get_trials(deepcopy=False), search.retries)]
    notes = []
    if stopped:
        notes.append(f"trials {stopped} were stopped (Ctrl-C or SIGTERM) and run again on resuming")
    if summary["retried"]:
        notes.append(f"{summary['retried']} stopped trial(s) ran again as retries, not counted")
    machines = {
        t.user_attrs[MACHINE] for t in study.get_trials(deepcopy=False) if MACHINE in t.user_attrs
    }
    if len(machines) > 1:
        notes.append(
            f"trials ran on {len(machines)} kinds of machine (`trials.csv`, column `machine`), "
            "whose values differ by more than their settings"
        )
    return notes


def _best_lines(best: FrozenTrial, params: Params, own_file: bool) -> list[str]:
    """The summary's best trial (its score per task, for a study across tasks) and how to
    confirm it."""
    search = search_section(params)
    lines = [
        f"**Best: trial {best.number}, {'score' if search.tasks else search.objective} "
        f"{best.value:.4g}** "
        "(`best_params.yaml`).",
        "",
    ]
    if search.tasks:
        per_task = ", ".join(
            f"{task.env} {best.user_attrs.get(TASK_SCORE + task.env, float('nan')):.3g}"
            for task in search.tasks
        )
        lines += [f"Its score per task (0: `low`, 1: `high`): {per_task}.", ""]
    if own_file:
        lines += [
            "This study ran from its own params file, not the project's `params.yaml`. To "
            "confirm the best trial as a DVC experiment, make that file's experiment the "
            "project's (copy it to `params.yaml` without its `search` section, with the "
            "budget and `seeds` to confirm on), merge `best_params.yaml` into it, and run "
            "`dvc exp run`.",
            "",
        ]
        return lines
    lines += [
        f"To confirm it on every seed of `seeds` {params.seeds} as a DVC experiment, and "
        "compare it with the baseline:",
        "",
        "```bash",
        f"dvc exp run dvc.yaml -n best-trial-{best.number} " + " ".join(_set_flags(best, params)),
        "python -m pipelines compare",
        "```",
        "",
    ]
    return lines


def _ranked_lines(study: optuna.Study, search: SearchParams) -> list[str]:
    """The summary's table of the ten best completed trials, best first."""
    ranked = sorted(
        (
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and math.isfinite(t.value)
        ),
        key=lambda t: t.value or 0.0,
        reverse=search.direction == "maximize",
    )
    if not ranked:
        return []
    # A study across tasks shows each task's score and the worst of them: a mean can hide
    # one task far below the rest, which "no task behind" targets care about.
    tasks = [TASK_SCORE + task.env for task in search.tasks]
    task_heads = [f"score {name.removeprefix(TASK_SCORE)}" for name in tasks]
    task_heads += ["worst task"] if tasks else []
    lines = [
        "Completed trials, best first" + (" (scores: 0 `low`, 1 `high`)" if tasks else "") + ":",
        "",
        "| trial | value | " + " | ".join([*task_heads, *search.space]) + " |",
        "|---" * (2 + len(task_heads) + len(search.space)) + "|",
    ]
    for t in ranked[:10]:
        scores = [t.user_attrs.get(name, float("nan")) for name in tasks]
        task_cells = [f"{score:.3g}" for score in scores]
        task_cells += [f"{min(scores):.3g}"] if tasks else []
        values = trial_values(t, search.space)
        cells = " | ".join([*task_cells, *(json.dumps(values.get(k)) for k in search.space)])
        lines.append(f"| {t.number} | {t.value:.4g} | {cells} |")
    lines.append("")
    return lines
