"""What a training run is called in TensorBoard: its experiment and the params it changes.

`dvc exp run` names an experiment at random (`astir-lore`), and `params.yaml`'s `name` stays
as its values change: neither says what a run tried. `run_name` adds the params the train
stage reads (the sections dvc.yaml's train stage lists) whose values, presets resolved,
differ from the committed experiment's: `params.yaml` at DVC's baseline commit under `dvc
exp run` (DVC_EXP_BASELINE_REV), else at HEAD. Outside git, or where the committed file is
missing or no longer valid, they are compared with the defaults the experiment starts from
(its env's and algorithm's preset), so the name carries what params.yaml sets beyond them.

    astir-lore__env.num_envs=16,ppo.lr=0.001

A name longer than `MAX_NAME` characters is cut after its last whole param that fits and
ends in a hash of the whole (`~3fa2b1c9`), so runs of different params keep different names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from pipelines.bounded import BoundedInputError, load_yaml
from pipelines.params import PRESET_SECTIONS, Params, ParamsError, flatten_paths, parse_params

# The sections the train stage reads (dvc.yaml's train stage lists the same).
TRAIN_SECTIONS = ("preset", *PRESET_SECTIONS, "runtime")
# Set per seed from `seeds`, so never a difference between experiments.
NOT_NAMED = ("trainer.seed",)
MAX_NAME = 96
_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+~-]+")  # a folder name on any OS, and readable


def experiment_label(default: str) -> str:
    """The DVC experiment being run (`dvc exp run` sets DVC_EXP_NAME), else `default`."""
    return os.environ.get("DVC_EXP_NAME") or default


def run_name(params: Params, root: Path) -> str:
    """The experiment's label, then `__` and each param that differs from the committed
    experiment (`key=value`, sorted, comma-separated; an algorithm's keys without the
    `algorithm.` before its name); at most `MAX_NAME` characters."""
    changed = differing_params(params, baseline_params(params, root))
    shown = sorted(f"{_short(key)}={_shown(value)}" for key, value in changed.items())
    name = _UNSAFE.sub(
        "-", "__".join([experiment_label(params.name), *([",".join(shown)] if shown else [])])
    )
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    head = name[: MAX_NAME - len(digest) - 1]
    if "," in head:  # whole params only
        head = head[: head.rindex(",") + 1]
    return f"{head}~{digest}"


def train_params(params: Params) -> dict[str, Any]:
    """The values the train stage reads, flat (`algorithm.ppo.lr`), presets resolved."""
    data = params.model_dump(mode="json")
    flat = flatten_paths({section: data[section] for section in TRAIN_SECTIONS}, lambda _: False)
    return {key: value for key, value in flat.items() if key not in NOT_NAMED}


def differing_params(params: Params, baseline: Params) -> dict[str, Any]:
    """The train stage's values that `params` sets differently from `baseline`, by key."""
    now, then = train_params(params), train_params(baseline)
    return {
        key: now[key]
        for key in sorted(now)
        if (then[key] != now[key] if key in then else now[key] is not None)
    }


def baseline_params(params: Params, root: Path) -> Params:
    """The committed experiment (`params.yaml` in `root` at the baseline commit); else the
    defaults `params` starts from: its env's and algorithm's preset."""
    rev = os.environ.get("DVC_EXP_BASELINE_REV") or "HEAD"
    try:
        shown = subprocess.run(
            ["git", "show", f"{rev}:./params.yaml"], cwd=root, capture_output=True, text=True
        )
    except OSError:  # no git on this machine
        shown = None
    if shown is not None and shown.returncode == 0:
        try:
            return parse_params(load_yaml(shown.stdout))
        except (ParamsError, BoundedInputError, yaml.YAMLError):
            pass  # committed under another schema: the defaults below
    start = {
        "preset": params.preset,
        "env": {"name": params.env.name},
        "algorithm": {"name": params.algorithm.name},
    }
    try:
        return parse_params(start)
    except ParamsError:  # defaults that do not stand alone: nothing to name as different
        return params


def _short(key: str) -> str:
    """`algorithm.ppo.lr` as `ppo.lr`: an algorithm's section names it."""
    parts = key.split(".")
    return ".".join(parts[1:]) if parts[0] == "algorithm" and len(parts) > 2 else key


def _shown(value: Any) -> str:
    """A value as a name shows it: `0.001`, `true`, `null`, `64+64` for a list."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "+".join(_shown(item) for item in value)
    if isinstance(value, dict):
        return "+".join(f"{key}-{_shown(item)}" for key, item in sorted(value.items()))
    return str(value)
