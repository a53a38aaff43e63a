"""Untrusted YAML and JSON text, read within bounds: a shared file is data, never a way to
exhaust memory or the stack.

params.yaml comes through git and `dvc exp run -S`, metrics through a DVC remote, configs
from colleagues. A 7 KB YAML alias bomb expands to billions of nodes and a JSON file nested
5,000 levels deep overflows the parser's recursion, so every such file is read here: at most
`MAX_BYTES`, YAML without anchors or aliases (none of the project's files needs them) and of
at most `MAX_NODES` values, and at most `MAX_DEPTH` levels of nesting. Each violation is a
`BoundedInputError`, one line. Malformed text still raises the parser's own error
(`yaml.YAMLError`, `json.JSONDecodeError`), which callers report with its line and column.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent

MAX_BYTES = 1 << 20  # far above any params.yaml or EmbodiChain config (a few KB)
MAX_DEPTH = 64  # params.yaml nests about 6 levels; Python's parsers recurse per level
MAX_NODES = 50_000  # params.yaml holds a few hundred; bounds PyYAML's (slow) node building
# A JSON string literal (escapes included), and everything that is not a bracket.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class BoundedInputError(ValueError):
    """The text exceeds a bound (size, nesting, aliases, digits) or holds a value that
    cannot be built; the message is one line, located where the parser knows where."""


def read_text(path: Path, max_bytes: int = MAX_BYTES) -> str:
    """Read at most `max_bytes` of UTF-8 text from `path`; raises OSError if unreadable."""
    with path.open("rb") as handle:
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise BoundedInputError(f"larger than {_size(max_bytes)}: not a config file; nothing read")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundedInputError(f"byte {exc.start}: not UTF-8 text") from None


def load_yaml(text: str) -> Any:
    """Parse one YAML document with the safe loader, refusing anchors, aliases and deep
    nesting before anything is built."""
    _check_size(text)
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except ValueError as exc:  # int('9' * 5000), a date 2024-13-45
        if isinstance(exc, BoundedInputError):
            raise
        raise BoundedInputError(f"a value cannot be read ({_one_line(exc)})") from None
    finally:
        loader.dispose()


def load_json(text: str) -> Any:
    """Parse JSON text, refusing deep nesting before the (recursive) parser sees it."""
    _check_size(text)
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_DEPTH:
            raise BoundedInputError(f"nested deeper than {MAX_DEPTH} levels: not a config file")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # a number of more than 4,300 digits
        raise BoundedInputError(f"a value cannot be read ({_one_line(exc)})") from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, composing no anchor or alias, at most `MAX_DEPTH` levels and
    `MAX_NODES` nodes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        event = self.peek_event()
        where = f"line {event.start_mark.line + 1}, column {event.start_mark.column + 1}"
        anchored = isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor
        if isinstance(event, AliasEvent) or anchored:
            raise BoundedInputError(
                f"{where}: YAML anchors and aliases (&name, *name) are not accepted; "
                "write the values out"
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise BoundedInputError(f"{where}: more than {MAX_NODES:,d} values: not a config file")
        if not isinstance(event, CollectionStartEvent):
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise BoundedInputError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_size(text: str) -> None:
    if len(text) > MAX_BYTES:
        raise BoundedInputError(f"larger than {_size(MAX_BYTES)}: not a config file")


def _size(n_bytes: int) -> str:
    return f"{n_bytes / (1 << 20):g} MiB" if n_bytes >= 1 << 20 else f"{n_bytes:,d} bytes"


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
