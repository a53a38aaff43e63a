"""Markdown that reads the same away from its directory (a Prefect artifact, say).

The reports link their curve images and videos by paths relative to the report, which
a viewer elsewhere (Prefect's UI) cannot follow: images show broken and links lead nowhere.
`portable` inlines each local image as a data URI and turns each local link into its
absolute path as text: the UI shows the figures, and the reader learns where the video is
on the machine that ran the flow. Web links and anchors stay as they are. It also joins
hard-wrapped lines (Prefect's renderer shows every newline as a line break) and splits a
table too wide for the UI into narrower ones.

The document is parsed with markdown-it (CommonMark plus GFM tables): only the source lines
of paragraphs, headings and tables are rewritten, from their own tokens, so a line that
merely looks like markup (`0. 91 ...` inside a paragraph) stays what the parser found, and
code blocks, HTML and block structure are never touched.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from markdown_it import MarkdownIt, rules_inline
from markdown_it.token import Token

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".svg": "image/svg+xml",
}
_KEEP = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", re.IGNORECASE)  # http:, data:, mailto:, #x
# Prefect's UI cuts a table at about this width. A cell's width is estimated from its text:
# a character of the UI's table font plus, per cell, its padding and border.
TABLE_WIDTH_PX = 1400
CHAR_PX = 8
CELL_PX = 24
_ALIGN = {"text-align:left": ":--", "text-align:right": "--:", "text-align:center": ":-:"}


def portable(markdown: str, base_dir: Path) -> str:
    """`markdown` (written in `base_dir`) with local images inlined and local links made
    absolute paths (a missing image becomes its alt text and path, not a broken icon),
    wrapped lines joined and wide tables split."""
    text = markdown.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    tokens = _parser().parse(text)
    replaced: dict[int, tuple[int, list[str]]] = {}  # first line -> (end line, new lines)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type == "table_open" and token.map:
            end = next(j for j in range(i, len(tokens)) if tokens[j].type == "table_close")
            new = _table(tokens[i:end], lines[token.map[0]], base_dir)
            replaced[token.map[0]] = (token.map[1], new)
            i = end
        elif token.type == "inline" and token.map:
            atx = tokens[i - 1].type == "heading_open" and tokens[i - 1].markup.startswith("#")
            new_lines = _inline_block(token, lines, base_dir, atx)
            if new_lines is not None:
                count = token.content.count("\n") + 1
                replaced[token.map[0]] = (token.map[0] + count, new_lines)
        i += 1
    out: list[str] = []
    line = 0
    while line < len(lines):
        if line in replaced:
            line, new = replaced[line]
            out += new
        else:
            out.append(lines[line])
            line += 1
    return "\n".join(out)


@functools.cache
def _parser() -> MarkdownIt:
    """CommonMark with GFM tables and strikethrough (as Prefect's renderer reads it), whose
    link, image and softbreak tokens record where in their inline source they lie."""
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    for name, kind in (("link", "link_open"), ("image", "image"), ("newline", "softbreak")):
        md.inline.ruler.at(name, _recording(getattr(rules_inline, name), kind))
    return md


def _recording(rule: Callable[[Any, bool], bool], kind: str) -> Callable[[Any, bool], bool]:
    """`rule`, marking the token of `kind` it makes with its source span (and, for a link,
    where its label ends) in `token.meta`."""

    def recorded(state: Any, silent: bool) -> bool:
        start, count = state.pos, len(state.tokens)
        label_end = -1
        if kind == "link_open" and not silent and state.src[start] == "[":
            label_end = state.md.helpers.parseLinkLabel(state, start, True)
        if not rule(state, silent):
            return False
        if not silent:
            made = next((t for t in state.tokens[count:] if t.type == kind), None)
            if made is not None:
                made.meta.update(span=(start, state.pos), label_end=label_end)
        return True

    return recorded


def _inline_block(token: Token, lines: list[str], base_dir: Path, atx: bool) -> list[str] | None:
    """The new source lines of a paragraph or heading; None where its text cannot be found
    in its lines as the parser saw it (the block is left as written)."""
    content = token.content.split("\n")
    start = token.map[0] if token.map else 0
    cuts: list[tuple[str, str]] = []  # each line's text before and after its content
    for k, piece in enumerate(content):
        line = lines[start + k]
        if atx:
            at = line.find(piece, line.index("#") + 1) if piece else -1
        else:
            body = line.rstrip()
            at = len(body) - len(piece.rstrip()) if body.endswith(piece.rstrip()) else -1
        if at < 0:
            return None
        cuts.append((line[:at], line[at + len(piece) :]))
    source = token.content

    def newline(at: int) -> str:
        return "\n" + cuts[source.count("\n", 0, at) + 1][0]

    text = _rewrite(source, _spans(token), 0, len(source), base_dir, newline)
    new = text.split("\n")
    new[0] = cuts[0][0] + new[0]
    new[-1] += cuts[-1][1]
    return new


def _spans(token: Token) -> list[tuple[int, int, Token]]:
    return sorted(
        (*child.meta["span"], child) for child in token.children or [] if "span" in child.meta
    )


def _rewrite(
    source: str,
    spans: list[tuple[int, int, Token]],
    lo: int,
    hi: int,
    base_dir: Path,
    newline: Callable[[int], str],
) -> str:
    """`source[lo:hi]` with its soft breaks joined, local images inlined and local links
    made paths; `newline(at)` stands for each newline kept (the next line's indentation)."""
    out: list[str] = []

    def copy(start: int, stop: int) -> None:
        at = source.find("\n", start, stop)
        while at >= 0:
            out.extend((source[start:at], newline(at)))
            start, at = at + 1, source.find("\n", at + 1, stop)
        out.append(source[start:stop])

    pos = lo
    for start, end, child in spans:
        if start < pos or end > hi:
            continue  # inside a link's label: rewritten with it
        copy(pos, start)
        if child.type == "softbreak":
            if not out[-1].endswith(" "):  # a space before the newline: kept, not doubled
                out.append(" ")
        elif child.type == "image":
            out.append(_image(child, base_dir) or source[start:end])
        else:
            label_end = child.meta["label_end"]
            label = _rewrite(source, spans, start + 1, label_end, base_dir, newline)
            href = str(child.attrs.get("href", ""))
            if _KEEP.match(href):
                out.append(f"[{label}{source[label_end:end]}")
            else:
                out.append(f"{label} (`{(base_dir / unquote(href)).resolve()}`)")
        pos = end
    copy(pos, hi)
    return "".join(out)


def _image(token: Token, base_dir: Path) -> str | None:
    """A local image as a data URI (None: a web image, kept as written)."""
    href = str(token.attrs.get("src", ""))
    if _KEEP.match(href):
        return None
    path = (base_dir / unquote(href)).resolve()
    kind = IMAGE_TYPES.get(path.suffix.lower())
    if kind is None or not path.is_file():
        return f"{token.content} (`{path}`{'' if path.is_file() else ', missing'})"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"![{token.content}](data:{kind};base64,{data})"


def _table(tokens: list[Token], first_line: str, base_dir: Path) -> list[str]:
    """A table's rows rewritten, as tables narrow enough for the UI: where the columns are
    too wide together, several tables of as many columns as fit, each repeating the first."""
    rows: list[list[str]] = []
    aligns: list[str] = []
    for i, token in enumerate(tokens):
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "inline":
            rows[-1].append(_rewrite_cell(token, base_dir))
            if len(rows) == 1:
                aligns.append(_ALIGN.get(str(tokens[i - 1].attrs.get("style", "")), "---"))
    widths = [
        max(_visible_len(row[c]) for row in rows) * CHAR_PX + CELL_PX for c in range(len(aligns))
    ]
    indent = re.match(r"[ \t>]*", first_line)
    prefix = indent[0] if indent else ""
    out: list[str] = []
    for group in _column_groups(widths):
        if out:
            out.append(prefix.rstrip())
        out.append(prefix + "| " + " | ".join(rows[0][c] for c in group) + " |")
        out.append(prefix + "|" + "|".join(aligns[c] for c in group) + "|")
        out += [prefix + "| " + " | ".join(row[c] for c in group) + " |" for row in rows[1:]]
    return out


def _rewrite_cell(token: Token, base_dir: Path) -> str:
    cell = _rewrite(token.content, _spans(token), 0, len(token.content), base_dir, lambda _: " ")
    return cell.replace("|", "\\|")  # the parser unescaped them: each was escaped


def _visible_len(cell: str) -> int:
    """Characters a cell shows (markup and link targets left out)."""
    tokens = _parser().parseInline(cell.replace("\\|", "|"))
    children = [child for token in tokens for child in token.children or []]
    return sum(len(c.content) for c in children if c.type in ("text", "code_inline", "image"))


def _column_groups(widths: list[int]) -> list[list[int]]:
    """Column indices per table: the first column in each, then as many more (at least
    one) as fit `TABLE_WIDTH_PX` beside it."""
    groups: list[list[int]] = [[0]]
    used = widths[0]
    for column in range(1, len(widths)):
        if used + widths[column] > TABLE_WIDTH_PX and len(groups[-1]) > 1:
            groups.append([0])
            used = widths[0]
        groups[-1].append(column)
        used += widths[column]
    return groups
