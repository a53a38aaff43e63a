"""The `plugins` stage: the source of an algorithm or env of your own, so that DVC sees it
change.

`algorithm.name: "my_pkg.my_algo:my_algo"` (and `env.name: "gymnasium:my_pkg.envs:MyEnv-v0"`)
trains code that lives outside this project's `rlcore`, which dvc.yaml cannot name: its deps
are fixed, and the module comes from params.yaml.
So this stage runs on every `dvc repro` (`always_changed`) and writes `metrics/plugins.json`:
for each module such a name imports, the sha256 of every `.py` file of the package it belongs to
(its top-level package, so a helper module of the same package counts too), or of the
module's own file when it is a top-level module. `train` depends on that file: it re-runs
when that source changes, and only then. With a builtin algorithm the file is always
`{"modules": {}}`, so nothing re-runs. Paths are relative to the package's parent folder
(`my_pkg/my_algo.py`), so the file is the same on every machine that has the same source.

Nothing of the plugin runs here, nor torch: the module's file is found with
`importlib.util.find_spec`, which imports only its parent packages. A module that cannot be
found is recorded as `null`; `train` then refuses the name with its own message.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from pipelines.bounded import BoundedInputError, load_yaml, read_text
from pipelines.files import write_json
from pipelines.layout import Layout
from rlcore.config import GYMNASIUM_PREFIX

HELP = (
    "Record the source of an algorithm of your own (algorithm.name: 'package.module:name'): "
    "the sha256 of its package's .py files, in metrics/plugins.json, which train depends "
    "on. DVC runs it on every `dvc repro`; the file changes only when that source does."
)


def plugin_modules(data: Any) -> list[str]:
    """The modules of your own that a params mapping names: `algorithm.name`'s
    (`pkg.module:name`) and a Gymnasium env's (`env.name: "gymnasium:pkg.module:Id-v0"`,
    the module that registers it). Builtin names, and sections that are not mappings
    (`train` reports those), name none."""
    modules = []
    algorithm = _section(data, "algorithm").get("name")
    if isinstance(algorithm, str) and algorithm.rpartition(":")[0]:
        modules.append(algorithm.rpartition(":")[0])
    env = _section(data, "env").get("name")
    if isinstance(env, str) and env.startswith(GYMNASIUM_PREFIX):
        env_id = env.removeprefix(GYMNASIUM_PREFIX)
        if ":" in env_id:  # Gymnasium's `module:EnvId`: the module registers the env
            modules.append(env_id.split(":", 1)[0])
    return list(dict.fromkeys(modules))


def _section(data: Any, name: str) -> dict[str, Any]:
    section = data.get(name) if isinstance(data, dict) else None
    return section if isinstance(section, dict) else {}


def module_sources(module: str) -> dict[str, str] | None:
    """sha256 of each `.py` file of the package `module` belongs to (of its own file for a
    top-level module), by path relative to the package's parent folder; None if no such
    module can be found."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:  # a parent package that is missing or fails to import
        return None
    if spec is None or not spec.has_location or spec.origin is None:
        return None
    origin = Path(spec.origin)
    # Folders between the module's file and the sys.path entry it was found on.
    depth = module.count(".") + (spec.submodule_search_locations is not None)
    root = origin.parents[depth]
    top = root / origin.relative_to(root).parts[0]
    files = {origin, *top.rglob("*.py")} if top.is_dir() else {origin}
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(files)
        if path.is_file()
    }


def fingerprint(data: Any) -> dict[str, Any]:
    """What `metrics/plugins.json` holds for a params mapping."""
    return {"modules": {module: module_sources(module) for module in plugin_modules(data)}}


def record_plugins(data: Any, layout: Layout) -> dict[str, Any]:
    """Write the fingerprint of a params mapping's algorithm to `layout.plugins`, touching
    the file only when its content changes; return it."""
    found = fingerprint(data)
    path = layout.plugins
    if not _holds(path, found):
        write_json(path, found)
    for module, files in found["modules"].items():
        what = "not found" if files is None else f"{len(files)} file(s) hashed"
        print(f"[plugins] {module}: {what}, recorded in {path}", flush=True)
    return found


def _holds(path: Path, data: dict[str, Any]) -> bool:
    try:
        return json.loads(path.read_text()) == data
    except (OSError, ValueError):  # absent, or not what this stage writes
        return False


def plugins_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines plugins", description=HELP)
    parser.add_argument(
        "--params",
        type=Path,
        default=Path("params.yaml"),
        help="the experiment file (default: params.yaml)",
    )
    args = parser.parse_args(argv)
    try:
        data = load_yaml(read_text(args.params))
    except (OSError, BoundedInputError, yaml.YAMLError) as exc:
        print(f"error: plugins: {args.params}: {_unreadable(exc)}", file=sys.stderr)
        return 2
    record_plugins(data, Layout())
    return 0


def _unreadable(exc: Exception) -> str:
    """Why params.yaml could not be read, in one line (`pipelines.params` says more)."""
    if isinstance(exc, OSError):
        return f"cannot be read ({exc.strerror or exc})"
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{where}{'malformed YAML' if mark else 'cannot be read'} ({problem})"
