"""Reading params.yaml: the YAML loaded (bounded), then validated in one pass that reports
every problem; and dotted-path values applied to a validated `Params`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipelines.bounded import BoundedInputError, load_yaml, read_text
from pipelines.params.errors import (
    ParamsError,
    _cross_section_line,
    _old_layout_errors,
    describe_errors,
    strict_number_errors,
)
from pipelines.params.presets import with_preset
from pipelines.params.sections import Params, _parse_algorithm
from rlcore.algos.registry import algorithm_names

DEFAULT_PATH = Path("params.yaml")


def parse_params(data: object, path: Path = DEFAULT_PATH) -> Params:
    """Validate an already-loaded mapping. Its `search` section is left as data: only the
    search reads it (`pipelines.search.space.checked_search`), so a space written for another
    algorithm (`algorithm.ppo.lr` after `-S algorithm.name=sac`) never stops training."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(path, [f"<top level>: must be a mapping, got {type(data).__name__}"])
    errors = _old_layout_errors(data)
    if not errors:
        data, errors = with_preset(data)
    if errors:
        raise ParamsError(path, errors)
    algorithm, algorithm_errors = _parse_algorithm(data.get("algorithm"))
    errors += algorithm_errors
    skip = {"algorithm", *algorithm_names()}
    rest = {key: value for key, value in data.items() if key not in skip}
    try:
        params = Params.model_validate(rest)
    except ValidationError as exc:
        errors += describe_errors(exc)
    if errors:
        raise ParamsError(path, errors)
    if algorithm is not None:
        params = params.model_copy(update={"algorithm": algorithm})
    errors = strict_number_errors(data, params.model_dump(), [])
    if errors:
        raise ParamsError(path, errors)
    try:  # rules that span sections, e.g. grpo.group_size must divide env.num_envs
        params.experiment()
    except ValueError as exc:
        raise ParamsError(path, [_cross_section_line(exc)]) from None
    return params


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested mapping, creating the intermediate mappings."""
    *parents, leaf = dotted.split(".")
    for key in parents:
        if data.get(key) is None:  # absent, or an algorithm section left out (null)
            data[key] = {}
        data = data[key]
    data[leaf] = value


def apply_values(params: Params, values: dict[str, Any]) -> Params:
    """`params` with dotted-path `values` applied, validated exactly like params.yaml."""
    data = params.model_dump(mode="json")
    del data["trainer"]["seed"]  # the seeds are the top-level `seeds`
    for dotted, value in values.items():
        set_path(data, dotted, value)
    return parse_params(data)


def load_params(path: str | Path = DEFAULT_PATH) -> Params:
    """Read and validate `params.yaml`; any problem raises `ParamsError`."""
    path = Path(path)
    try:
        text = read_text(path)
    except OSError as exc:
        raise ParamsError(path, [f"cannot be read ({exc.strerror or exc})"]) from None
    except BoundedInputError as exc:
        raise ParamsError(path, [str(exc)]) from None
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        raise ParamsError(
            path, ["is empty: it must hold the experiment (start from the project's params.yaml)"]
        )
    try:
        data = load_yaml(text)  # no aliases, bounded depth: a shared file cannot exhaust memory
    except BoundedInputError as exc:
        raise ParamsError(path, [str(exc)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ParamsError(path, [f"{where}malformed YAML ({problem})"]) from None
    return parse_params(data, path)
