"""Shared files read within bounds: alias bombs, deep nesting and huge files are one line,
in bounded time and memory, wherever the platform reads YAML or JSON that others wrote."""

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.bounded import MAX_DEPTH, BoundedInputError, load_json, load_yaml, read_text
from pipelines.compare.aggregate import parse_eval_metrics
from pipelines.compare.runs import RunSource, load_run
from pipelines.params import ParamsError, load_params

REPO = Path(__file__).resolve().parents[2]
ALIAS_LINE = "YAML anchors and aliases (&name, *name) are not accepted; write the values out"


def _alias_bomb(indent: str, levels: int = 9) -> str:
    """A mapping of a few hundred bytes whose last list expands to 9**levels strings
    (9 levels: 387 million; PyYAML shares them, validating the file copies them)."""
    lines = [f"a0: &a0 [{', '.join(['x'] * 9)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(indent + line for line in lines) + "\n"


BOMBS = {  # the first anchor, `&a0`, is on line 6, column 9 of both
    "env.options": ("name: bomb\nseeds: [0]\nenv:\n  name: cartpole\n  options:\n", "    "),
    "search.enqueue": (
        "name: bomb\nseeds: [0]\nenv: {name: cartpole}\nsearch:\n  enqueue:\n",
        "  - ",
    ),
}


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # 2 GiB: the bomb needs far more


@pytest.mark.parametrize("where", BOMBS)
def test_an_alias_bomb_is_one_line_in_bounded_time_and_memory(tmp_path, where):
    head, indent = BOMBS[where]
    path = tmp_path / "params.yaml"
    path.write_text(head + _alias_bomb(indent))
    assert path.stat().st_size < 1_000
    result = subprocess.run(
        [sys.executable, "-m", "pipelines", "params", "--params", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"error: {path}: line 6, column 9: {ALIAS_LINE}\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("env:\n  options: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64 levels"),
        ("name: big\n" + "# padding\n" * 110_000, "larger than 1 MiB: not a config file"),
        ("env:\n  options: [" + "0, " * 60_000 + "0]\n", "more than 50,000 values"),
        ("seeds: [1" + "0" * 5000 + "]\n", "a value cannot be read (Exceeds the limit"),
        ("name: 2024-13-45\n", "a value cannot be read (month must be in 1..12)"),
    ],
    ids=["deep", "huge", "many", "digits", "date"],
)
def test_unbounded_params_are_one_params_error(tmp_path, text, line):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError) as caught:
        load_params(path)
    assert len(caught.value.lines) == 1 and line in caught.value.lines[0]


def test_nesting_up_to_the_bound_is_accepted_and_one_more_level_is_not():
    assert load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) == load_json(
        "[" * MAX_DEPTH + "]" * MAX_DEPTH
    )
    deeper = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(BoundedInputError, match="line 1, column 65: nested deeper than 64"):
        load_yaml(deeper)
    with pytest.raises(BoundedInputError, match="nested deeper than 64 levels"):
        load_json(deeper)
    # Brackets inside strings, escaped quotes included, are text, not nesting.
    text = json.dumps({"a": "[{" * 1000 + '\\"' + "[" * 100, "b": [[1]]})
    assert load_json(text)["b"] == [[1]]


@pytest.mark.parametrize("text", ["a: &x 1\nb: 2\n", "a: 1\nb: *x\n", "a: &x {k: 1}\nb: *x\n"])
def test_anchors_and_aliases_are_refused(text):
    with pytest.raises(BoundedInputError, match="anchors and aliases"):
        load_yaml(text)


def test_malformed_text_keeps_its_parsers_error():
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [1\n")
    with pytest.raises(json.JSONDecodeError):
        load_json('{"a": }')


def test_reading_stops_at_the_bound(tmp_path):
    with pytest.raises(BoundedInputError, match="larger than 1 MiB"):
        read_text(Path("/dev/zero"))  # endless: only 1 MiB + 1 byte is ever read
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(BoundedInputError, match="byte 9: not UTF-8 text"):
        read_text(latin)


@pytest.mark.parametrize(
    "path",
    [
        "params.yaml",
        "docs/params-reference.yaml",
        "dvc.yaml",
        *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "search").glob("*.yaml")),
    ],
)
def test_the_projects_own_files_need_no_anchors(path):
    assert load_yaml(read_text(REPO / path)) == yaml.safe_load((REPO / path).read_text())


def test_compare_reads_a_revisions_files_within_bounds():
    bomb = "name: bomb\nenv:\n  options:\n" + _alias_bomb("    ")
    run = load_run(RunSource("hostile", "abc123", "commit"), {"params.yaml": bomb}.get, None)
    assert run.problems == [f"params.yaml: line 4, column 9: {ALIAS_LINE}"]
    deep = '{"episodes": ' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(ValueError, match=r"^eval.json: nested deeper than 64 levels"):
        parse_eval_metrics(deep, "eval.json")
