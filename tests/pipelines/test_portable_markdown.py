"""Reports made readable in Prefect's UI: images inlined, local links made absolute paths."""

import base64

from pipelines.portable_markdown import portable, unwrap


def test_local_images_are_inlined_and_local_links_become_absolute_paths(tmp_path):
    report_dir = tmp_path / "reports" / "run"
    report_dir.mkdir(parents=True)
    png = b"\x89PNG\r\n\x1a\nnot really"
    (report_dir / "curve.png").write_bytes(png)
    text = (
        "![learning curve](curve.png)\n"
        "[4 episodes](../../outputs/video/episodes.mp4) and [docs](https://example.com/x)\n"
        "![gone](missing.png) [top](#evaluation) ![web](https://example.com/a.png)\n"
    )
    out = portable(text, report_dir)
    inlined = base64.b64encode(png).decode()
    assert out.splitlines()[0] == f"![learning curve](data:image/png;base64,{inlined})"
    video = tmp_path / "outputs" / "video" / "episodes.mp4"
    assert out.splitlines()[1] == f"4 episodes (`{video}`) and [docs](https://example.com/x)"
    assert out.splitlines()[2] == (
        f"gone (`{report_dir / 'missing.png'}`, missing) [top](#evaluation) "
        "![web](https://example.com/a.png)"
    )
    assert "](" not in out.replace("](data:", "").replace("](https:", "").replace("](#", "")


def test_hard_wrapped_prose_is_joined_and_blocks_are_kept():
    text = (
        "# Title\n"
        "A paragraph wrapped\n"
        "over two lines.\n"
        "\n"
        "- an item wrapped\n"
        "  onto a second line\n"
        "- another\n"
        "\n"
        "| a | b |\n"
        "|---|---|\n"
        "```\n"
        "code stays\n"
        "as written\n"
        "```\n"
    )
    assert unwrap(text) == (
        "# Title\n"
        "A paragraph wrapped over two lines.\n"
        "\n"
        "- an item wrapped onto a second line\n"
        "- another\n"
        "\n"
        "| a | b |\n"
        "|---|---|\n"
        "```\n"
        "code stays\n"
        "as written\n"
        "```\n"
    )
