"""Writing the imported params.yaml: its text (a header, then every section), read back and
validated before it replaces `-o`; and the `import-config` command.
"""

from __future__ import annotations

import argparse
import re
import stat
import sys
from pathlib import Path

import yaml

from pipelines.bounded import BoundedInputError, load_yaml
from pipelines.files import write_text
from pipelines.import_config.mapping import import_config
from pipelines.import_config.read import ConfigImportError, Imported, _printable
from pipelines.params import ParamsError, parse_params


def render(imported: Imported, source: Path) -> str:
    """The params.yaml text: a header (source, imported, not imported), then every section."""
    lines = [
        f"# Imported from {_printable(str(source))} (an EmbodiChain training config) by",
        "# `python -m pipelines import-config`; every value not listed below is what",
        "# `preset: auto` gives this env and algorithm. Validated by pipelines/params/.",
        "#",
        "# Imported (ours <- theirs):",
        *(f"#   {line}" for line in imported.imported),
        "#",
        f"# Not imported ({len(imported.dropped)}, no equivalent here):",
        *(f"#   {line}" for line in imported.dropped),
    ]
    body = yaml.dump(imported.data, Dumper=_Dumper, sort_keys=False, width=100)
    # A blank line before each top-level section, as in the hand-written params.yaml.
    body = re.sub(r"\n(?=\S)", "\n\n", body)
    return "\n".join(lines) + "\n\n" + body


class _Dumper(yaml.SafeDumper):
    """Block mappings, flow lists (`hidden_sizes: [256, 256]`)."""


_Dumper.add_representer(
    list, lambda dumper, value: dumper.represent_sequence("tag:yaml.org,2002:seq", value, True)
)


_NOT_REGULAR = [
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
]


def _output_problem(path: Path, force: bool) -> str | None:
    """Why `-o` cannot be written: only a new file or, with --force, a regular file is
    replaced; a device, FIFO, directory or symlink never is (replacing is a rename)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be written ({exc.strerror or exc})"
    if stat.S_ISLNK(mode):
        return "is a symbolic link; name the file itself (a link is never followed)"
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), None)
    if kind is not None:
        return f"is {kind}, not a regular file; name a params.yaml to write"
    return None if force else "already exists; pass --force to overwrite it"


def _check_reads_back(text: str, imported: Imported) -> None:
    """The text to write loads as params.yaml does, to exactly what was validated."""
    try:
        data = load_yaml(text)
        parse_params(data)
    except (BoundedInputError, yaml.YAMLError, ParamsError):
        data = None
    if data != imported.data:
        raise ConfigImportError(
            ["the params.yaml it gives would not read back as validated; nothing was written"]
        )


def import_config_main(argv: list[str]) -> int:
    """`import-config`: write params.yaml from an EmbodiChain JSON; 0 written, 2 bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines import-config",
        description="Turn an EmbodiChain training config (JSON) into a params.yaml.",
    )
    parser.add_argument("config", type=Path, help="EmbodiChain's train_config.json")
    parser.add_argument("-o", "--output", type=Path, default=Path("params.yaml"))
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")
    parser.add_argument(
        "--env", help="an EmbodiChain env id (PushCubeRL) or ours, when the file's is unreadable"
    )
    args = parser.parse_args(argv)
    # Every problem at once, the input's and the output's: one fix, not one per run.
    errors = []
    try:
        imported = import_config(args.config, args.env)
        text = render(imported, args.config)
        _check_reads_back(text, imported)
    except ConfigImportError as exc:
        errors += [f"{_printable(str(args.config))}: {_printable(line)}" for line in exc.lines]
    problem = _output_problem(args.output, args.force)
    if problem is not None:
        errors.append(f"{_printable(str(args.output))}: {problem}")
    if errors:
        print("\n".join(f"error: {line}" for line in errors), file=sys.stderr)
        return 2
    try:
        write_text(args.output, text)
    except OSError as exc:
        print(f"error: {args.output}: cannot be written ({exc.strerror or exc})", file=sys.stderr)
        return 2
    algorithm, env = imported.data["algorithm"]["name"], imported.data["env"]["name"]
    print(f"wrote {args.output}: {algorithm} on {env}, from {args.config}")
    print("imported (ours <- theirs):")
    print("\n".join(f"  {line}" for line in imported.imported))
    print(f"not imported ({len(imported.dropped)}, no equivalent here):")
    print("\n".join(f"  {line}" for line in imported.dropped))
    return 0
