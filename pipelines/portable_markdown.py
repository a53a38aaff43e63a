"""Markdown that reads the same away from its directory (a Prefect artifact, say).

The reports link their curve images and videos by paths relative to the report, which
a viewer elsewhere (Prefect's UI) cannot follow: images show broken and links lead nowhere.
`portable` inlines each local image as a data URI and turns each local link into its
absolute path as text: the UI shows the figures, and the reader learns where the video is
on the machine that ran the flow. Web links and anchors stay as they are. It also joins
hard-wrapped lines, which Prefect's renderer would show as line breaks.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".svg": "image/svg+xml",
}
_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<href>[^)\s]+)\)")
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<href>[^)\s]+)\)")
# Lines that start a block of their own, and lines after which a new line never continues.
_STARTS_BLOCK = re.compile(r"^\s*$|^\s*(?:#|\||[-*+] |>|\d+\. |```|!\[|<)")
_ENDS_BLOCK = re.compile(r"^\s*(?:#|\||```|!\[|<)")
_KEEP = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", re.IGNORECASE)  # http:, data:, mailto:, #x


def portable(markdown: str, base_dir: Path) -> str:
    """`markdown` (written in `base_dir`) with local images inlined and local links made
    absolute paths; a missing image becomes its alt text and path, not a broken icon."""

    def image(match: re.Match[str]) -> str:
        alt, href = match["alt"], match["href"]
        if _KEEP.match(href):
            return match[0]
        path = (base_dir / href).resolve()
        kind = IMAGE_TYPES.get(path.suffix.lower())
        if kind is None or not path.is_file():
            return f"{alt} (`{path}`{'' if path.is_file() else ', missing'})"
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f"![{alt}](data:{kind};base64,{data})"

    def link(match: re.Match[str]) -> str:
        text, href = match["text"], match["href"]
        if _KEEP.match(href):
            return match[0]
        return f"{text} (`{(base_dir / href).resolve()}`)"

    return _LINK.sub(link, _IMAGE.sub(image, unwrap(markdown)))


def unwrap(markdown: str) -> str:
    """Join hard-wrapped paragraph and list-item lines: Prefect's renderer turns every
    newline into a line break, so wrapped prose would show as ragged short lines."""
    lines: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif (
            not fenced
            and lines
            and not _STARTS_BLOCK.match(line)
            and lines[-1].strip()
            and not _ENDS_BLOCK.match(lines[-1])
        ):
            lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
            continue
        lines.append(line)
    return "\n".join(lines) + ("\n" if markdown.endswith("\n") else "")
