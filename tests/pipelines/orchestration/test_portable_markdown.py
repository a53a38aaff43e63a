"""Reports made readable in Prefect's UI: images inlined, local links made absolute paths,
wrapped prose joined and wide tables split, the document's structure as the parser reads it."""

import base64

from markdown_it import MarkdownIt

from pipelines.orchestration import portable_markdown
from pipelines.orchestration.portable_markdown import portable


def blocks(text: str) -> list[str]:
    """The block structure a CommonMark + GFM-tables reader sees."""
    md = MarkdownIt("commonmark").enable("table")
    return [t.type for t in md.parse(text) if t.nesting == 1 or t.type in ("fence", "code_block")]


def test_local_images_are_inlined_and_local_links_become_absolute_paths(tmp_path):
    report_dir = tmp_path / "reports" / "run"
    report_dir.mkdir(parents=True)
    png = b"\x89PNG\r\n\x1a\nnot really"
    (report_dir / "curve.png").write_bytes(png)
    text = (
        "![learning curve](curve.png)\n"
        "\n"
        "[4 episodes](../../outputs/video/episodes.mp4) and [docs](https://example.com/x)\n"
        "\n"
        "![gone](missing.png) [top](#evaluation) ![web](https://example.com/a.png)\n"
        "[![linked figure](curve.png)](https://example.com/big.png)\n"
    )
    out = portable(text, report_dir).splitlines()
    inlined = base64.b64encode(png).decode()
    assert out[0] == f"![learning curve](data:image/png;base64,{inlined})"
    video = tmp_path / "outputs" / "video" / "episodes.mp4"
    assert out[2] == f"4 episodes (`{video}`) and [docs](https://example.com/x)"
    assert out[4] == (  # one paragraph: its two lines joined
        f"gone (`{report_dir / 'missing.png'}`, missing) [top](#evaluation) "
        "![web](https://example.com/a.png) "
        f"[![linked figure](data:image/png;base64,{inlined})](https://example.com/big.png)"
    )
    assert len(out) == 5


def test_a_wrapped_line_that_starts_with_a_number_stays_in_its_paragraph(tmp_path):
    # The report's video paragraph, wrapped before the seed: a regex took `0. Not` for a
    # list item and kept its line break, which Prefect showed as a list. CommonMark reads
    # `0.` inside a paragraph as text (only `1.` may interrupt one).
    text = (
        "[4 evaluation episodes](video.mp4) of the policy trained on seed\n"
        "0. Not in your workspace? `dvc repro video` makes it again;\n"
        "0.91 success on seed 2.\n"
    )
    out = portable(text, tmp_path)
    assert out == (
        f"4 evaluation episodes (`{tmp_path / 'video.mp4'}`) of the policy trained on seed "
        "0. Not in your workspace? `dvc repro video` makes it again; 0.91 success on seed 2.\n"
    )
    assert blocks(out) == blocks(text) == ["paragraph_open"]


def test_wrapped_prose_is_joined_and_every_other_block_is_kept_as_written(tmp_path):
    text = (
        "# Title [docs](https://example.com)\n"
        "A paragraph wrapped\n"
        "over two lines, with a hard break  \n"
        "kept.\n"
        "\n"
        "- an item wrapped\n"
        "  onto a second line\n"
        "- another\n"
        "\n"
        "> a quote wrapped\n"
        "> over two lines\n"
        "\n"
        "| a | b |\n"
        "|---|--:|\n"
        "| 1 | x \\| y |\n"
        "\n"
        "```\n"
        "code stays\n"
        "[as](written.md)\n"
        "```\n"
        "\n"
        "    indented code\n"
        "    ![stays](too.png)\n"
        "\n"
        "<div>\n"
        "html [stays](x.md)\n"
        "</div>\n"
    )
    out = portable(text, tmp_path)
    assert out == (
        "# Title [docs](https://example.com)\n"
        "A paragraph wrapped over two lines, with a hard break  \n"
        "kept.\n"
        "\n"
        "- an item wrapped onto a second line\n"
        "- another\n"
        "\n"
        "> a quote wrapped over two lines\n"
        "\n"
        "| a | b |\n"
        "|---|--:|\n"
        "| 1 | x \\| y |\n"
        "\n"
        "```\n"
        "code stays\n"
        "[as](written.md)\n"
        "```\n"
        "\n"
        "    indented code\n"
        "    ![stays](too.png)\n"
        "\n"
        "<div>\n"
        "html [stays](x.md)\n"
        "</div>\n"
    )
    assert blocks(out) == blocks(text)


def test_a_hard_break_in_a_list_item_keeps_the_items_indentation(tmp_path):
    text = "- first line\\\n  second [link](a.md)\n  third\n"
    assert portable(text, tmp_path) == (
        f"- first line\\\n  second link (`{tmp_path / 'a.md'}`) third\n"
    )


def test_a_table_too_wide_for_the_ui_is_split_repeating_its_first_column(tmp_path, monkeypatch):
    # Widths: 8 px a character + 24 px a cell. "run" column: 4 chars ("base") = 56 px;
    # each of p1..p4: 10 chars = 104 px. 56 + 104 + 104 = 264 fits 300; a third does not.
    monkeypatch.setattr(portable_markdown, "TABLE_WIDTH_PX", 300)
    values = "| " + " | ".join(f"{i}.000e-03" + "0" for i in range(1, 5)) + " |"
    text = (
        "Runs:\n\n"
        "| run | p1 | p2 | p3 | p4 |\n"
        "|---|---|--:|---|---|\n"
        f"| base {values}\n"
        "| new | a | b | c | [d](https://example.com/d) |\n"
        "\nAfter.\n"
    )
    out = portable(text, tmp_path)
    assert out == (
        "Runs:\n\n"
        "| run | p1 | p2 |\n"
        "|---|---|--:|\n"
        "| base | 1.000e-030 | 2.000e-030 |\n"
        "| new | a | b |\n"
        "\n"
        "| run | p3 | p4 |\n"
        "|---|---|---|\n"
        "| base | 3.000e-030 | 4.000e-030 |\n"
        "| new | c | [d](https://example.com/d) |\n"
        "\nAfter.\n"
    )
    assert blocks(out).count("table_open") == 2


def test_a_table_that_fits_is_one_table_and_a_lone_wide_column_still_shows(tmp_path, monkeypatch):
    text = "| run | x |\n|---|---|\n| [a](a.md) | 1 |\n"
    expected = f"| run | x |\n|---|---|\n| a (`{tmp_path / 'a.md'}`) | 1 |\n"
    assert portable(text, tmp_path) == expected
    monkeypatch.setattr(portable_markdown, "TABLE_WIDTH_PX", 10)  # no column fits
    assert portable(text, tmp_path) == expected  # the key column and one more, at least
