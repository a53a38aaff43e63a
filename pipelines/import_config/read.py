"""Reading an EmbodiChain config: the JSON within `pipelines.bounded`'s limits, its values
type-checked, and the error and result types of an import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.bounded import BoundedInputError, load_json, read_text


class ConfigImportError(ValueError):
    """The file cannot be imported; each of `lines` is `key: what to do`."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class Imported:
    """A validated params.yaml mapping, what went into it and what was left out."""

    data: dict[str, Any]
    imported: list[str]
    dropped: list[str]


def _show(value: Any) -> str:
    text = json.dumps(value)
    if len(text) <= 50 or not isinstance(value, dict | list):
        return text
    return "{...}" if isinstance(value, dict) else "[...]"


def _printable(text: str) -> str:
    """`text` on one line: newlines and other control characters escaped (a key `a\\nb`
    would otherwise end a header comment and write YAML of the file's choosing)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _typed(where: str, value: Any, like: Any) -> Any:
    """`value` if it has the JSON type of `like` (an integer may stand for a float)."""
    if isinstance(like, bool):
        ok, kind = isinstance(value, bool), "true or false"
    elif isinstance(like, int):
        ok, kind = type(value) is int, "an integer"
    elif isinstance(like, float):
        ok, kind = type(value) in (int, float), "a number"
    else:
        ok, kind = isinstance(value, str), "a string"
    if not ok:
        raise ConfigImportError([f"{where}: must be {kind}, got {_show(value)}"])
    return value


def _json_file(path: Path) -> Any:
    """The JSON value of `path`, read within `pipelines.bounded`'s limits."""
    try:
        return load_json(read_text(path))
    except OSError as exc:
        raise ConfigImportError(
            [f"cannot be read ({exc.strerror or exc}); check the path"]
        ) from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ConfigImportError([f"{where}: malformed JSON ({exc.msg})"]) from None
    except BoundedInputError as exc:
        raise ConfigImportError([str(exc)]) from None
