"""What a flow run publishes as Prefect artifacts: metrics tables, reports, the verdict.

Each is a task retried on transient I/O only (`dvc_tasks.retry_on_io`); a metrics file that
is missing or not a JSON object of numbers is a `RunOutputError`, never retried.
"""

from __future__ import annotations

import os

# Prefect starts its usage telemetry when it is imported, so opt out before the first import.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import json
import re
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from pipelines.bounded import BoundedInputError, load_json, read_text
from pipelines.compare.regression import Verdict, verdict_markdown
from pipelines.layout import Layout
from pipelines.orchestration.dvc_tasks import retry_on_io
from pipelines.orchestration.portable_markdown import portable

REPORT = Layout().report  # relative to the project dir
SEARCH_SUMMARY = Layout().search_reports / "summary.md"
COMPARE_REPORT = Layout().compare_report


class RunOutputError(RuntimeError):
    """A file the stages should have written is missing or not in the expected shape."""


def _numbers(path: Path) -> dict[str, float]:
    """One metrics file: a JSON object of numbers (nested objects, as DVCLive writes them,
    flattened to `a/b` names)."""
    try:
        data = load_json(read_text(path))  # DVC may restore it from a shared remote: bounded
    except json.JSONDecodeError as exc:
        raise RunOutputError(f"{path}: not valid JSON ({exc})") from None
    except BoundedInputError as exc:
        raise RunOutputError(f"{path}: {exc}") from None
    flat = _flatten(data) if isinstance(data, dict) else None
    if flat is None:
        raise RunOutputError(f"{path}: expected a JSON object of numbers")
    return flat


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, float] | None:
    flat: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            inner = _flatten(value, f"{prefix}{key}/")
            if inner is None:
                return None
            flat |= inner
        elif _is_number(value):
            flat[f"{prefix}{key}"] = value
        else:
            return None
    return flat


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def read_metrics(project_dir: str, files: list[str]) -> dict[str, dict[str, float]]:
    """Read the metrics files of this run's stages (`stage_metrics`), keyed by file."""
    if not files:
        raise RunOutputError(f"the stages run in {project_dir} declare no JSON metrics")
    missing = [file for file in files if not Path(project_dir, file).is_file()]
    if missing:
        raise RunOutputError(f"{', '.join(missing)} missing: the stages that write them did not")
    return {file: _numbers(Path(project_dir, file)) for file in files}


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def publish_metrics(metrics: dict[str, dict[str, float]], key: str) -> None:
    """Publish the metrics as a table artifact, one row per metric."""
    rows = [
        {"file": file, "name": name, "value": value}
        for file, values in metrics.items()
        for name, value in values.items()
    ]
    create_table_artifact(rows, key=key, description="the metrics files of this run's stages")


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def publish_report(project_dir: str, key: str, report: Path = REPORT) -> None:
    """Publish a Markdown report; its images inlined and its links made absolute paths,
    since Prefect's UI cannot follow paths relative to the report."""
    path = (Path(project_dir) / report).resolve()
    if not path.is_file():
        raise RunOutputError(f"{path} is missing: the stage that writes it did not")
    text = portable(path.read_text(), path.parent)
    create_markdown_artifact(text, key=key, description=f"{report} of this run")


def artifact_key(*parts: str) -> str:
    """An artifact key from free text (Prefect allows lowercase letters, digits and dashes)."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io, cache_policy=NO_CACHE)
def publish_verdict(verdict: Verdict, compare_page: str, key: str) -> None:
    """Publish the verdict as a Markdown artifact whose first line is the verdict."""
    create_markdown_artifact(
        verdict_markdown(verdict, compare_page), key=key, description=verdict.headline()
    )
