"""`params.yaml`'s errors: `ParamsError`, and the lines that name each problem's location,
e.g. `algorithm.ppo.clip_eps: must be > 0, got -1.0` (rlcore's own messages rewritten),
strict numbers, and the old layouts a file may still use.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlcore.algos.registry import algorithm_names


class ParamsError(ValueError):
    """`params.yaml` is missing, malformed or invalid; `lines` says where and why."""

    def __init__(self, path: Path, lines: list[str]) -> None:
        self.path, self.lines = path, lines
        super().__init__("\n".join(f"{path}: {line}" for line in lines))


# rlcore's dataclasses raise "section.field must be ...": lift the field into the location.
_LIBRARY_MESSAGE = re.compile(r"^(?:Value error, )?(\w+)\.(\w+) (.*)$", re.DOTALL)


# What each branch of a union field (`bool | Literal["auto"]`) accepts, by pydantic's tag.
_BRANCH_WORDS = {"bool": "true, false", "int": "an integer", "float": "a number", "none": "null"}
_LITERAL_BRANCH = re.compile(r"^literal\[(.*)\]$")


def _branch_words(tag: str) -> str | None:
    """What a union branch tagged `tag` accepts, in words; None where `tag` is no branch."""
    literal = _LITERAL_BRANCH.match(tag)
    if literal:
        return ", ".join(part.strip().strip("'\"") for part in literal.group(1).split(","))
    return _BRANCH_WORDS.get(tag.removeprefix("constrained-"))  # `Field(ge=1)`'s tag


def _merge_union_branches(items: list[Any]) -> list[Any]:
    """A union field's value that fits no branch, as one problem: pydantic reports one per
    branch (`runtime.compile.bool: ...`, `runtime.compile.literal['auto']: ...`), which
    names neither the field alone nor everything it accepts."""
    merged: list[Any] = []
    for item in items:
        words = _branch_words(str(item["loc"][-1])) if len(item["loc"]) > 1 else None
        kind = str(item["type"])
        if words is not None and not (
            kind.endswith(("_type", "_parsing")) or kind == "literal_error"
        ):
            words += f" ({item['msg'][:1].lower()}{item['msg'][1:]})"  # of the type, not within
        previous = merged[-1] if merged else None
        if words is None:
            merged.append(item)
        elif (
            previous is not None
            and previous.get("branches")
            and (previous["loc"] == tuple(item["loc"][:-1]))
        ):
            previous["branches"].append(words)
        else:
            merged.append({**item, "loc": tuple(item["loc"][:-1]), "branches": [words]})
    for item in merged:
        if item.get("branches"):
            accepted = ", ".join(item["branches"]).rsplit(", ", 1)
            item["msg"] = f"must be {' or '.join(accepted)}, got {item['input']!r}"
            item["type"] = "union"
    return merged


def describe_errors(error: ValidationError, prefix: list[str] | None = None) -> list[str]:
    """One `location: message` line per problem (`prefix`: where the model sits)."""
    lines = []
    for item in _merge_union_branches(error.errors()):
        loc = [*(prefix or []), *(str(part) for part in item["loc"])]
        message = item["msg"]
        match = _LIBRARY_MESSAGE.match(message)
        if match and (not loc or match.group(1) == loc[-1]):
            loc = loc or [match.group(1)]
            loc.append(match.group(2))
            message = match.group(3)
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        if item["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            message = "unknown key (check the spelling against docs/params-reference.yaml)"
        lines.append(f"{'.'.join(loc) or '<top level>'}: {message}")
    return lines


def strict_number_errors(raw: Any, validated: Any, loc: list[str]) -> list[str]:
    """What lax validation let through: a boolean taken for a number (`num_envs: true` would
    train 1 env), and numbers that are not finite (`.inf`, `.nan`, `1e999`) anywhere.

    Walks the file's values beside the validated ones; numeric strings stay accepted
    (PyYAML reads `3e-4` as a string).
    """
    where = ".".join(loc) or "<top level>"
    if isinstance(raw, dict) and isinstance(validated, dict):
        return [
            error
            for key, value in raw.items()
            if key in validated
            for error in strict_number_errors(value, validated[key], [*loc, str(key)])
        ]
    if isinstance(raw, list | tuple) and isinstance(validated, list | tuple):
        return [
            error
            for i, (value, checked) in enumerate(zip(raw, validated, strict=False))
            for error in strict_number_errors(value, checked, [*loc, str(i)])
        ]
    if isinstance(raw, bool) and isinstance(validated, int | float) and validated is not raw:
        return [f"{where}: must be a number, got {str(raw).lower()} (a boolean)"]
    if isinstance(validated, float) and not math.isfinite(validated):
        return [f"{where}: must be a finite number, got {raw!r}"]
    return []


def _old_layout_errors(data: dict[str, Any]) -> list[str]:
    """A registered algorithm's settings at the top level: say where they live now."""
    return [
        f"{name}: algorithm settings live under `algorithm.{name}`; write "
        f"`algorithm: {{name: {name}, {name}: {{...}}}}`"
        for name in algorithm_names()
        if name in data
    ]


def _cross_section_line(exc: ValueError) -> str:
    match = _LIBRARY_MESSAGE.match(str(exc))
    if match is None:
        return str(exc)
    section, field, message = match.groups()
    if section in ("env", "policy", "trainer", "replay"):
        return f"{section}.{field}: {message}"
    return f"algorithm.{section}.{field}: {message}"
