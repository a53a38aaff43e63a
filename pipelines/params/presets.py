"""Preset layering: the keys params.yaml leaves out come from a preset of `rlcore.presets`
(see `Params.preset`), laid under the file's values key by key.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rlcore.algos.registry import (
    UnknownAlgorithmError,
    algorithm_spec,
    section_name,
)
from rlcore.config import EnvConfig
from rlcore.presets import AUTO, PresetChoice, algorithm_settings, choose_preset

# The sections a preset fills (the experiment itself; the stages' own sections have no preset).
PRESET_SECTIONS = ("env", "policy", "algorithm", "trainer", "replay")


def algorithm_name(data: dict[str, Any]) -> str:
    """The algorithm a params mapping names (`ppo` where it names none, or not as a string:
    `_parse_algorithm` reports that)."""
    algorithm = data.get("algorithm")
    name = algorithm.get("name", "ppo") if isinstance(algorithm, dict) else "ppo"
    return name if isinstance(name, str) else "ppo"


def preset_choice(data: dict[str, Any]) -> PresetChoice:
    """The preset a params mapping selects (`preset`, its env and algorithm names); raises
    ValueError for an unknown preset name."""
    preset = data.get("preset", AUTO)
    if not isinstance(preset, str):
        raise ValueError(f"must be a preset name, auto or none, got {preset!r}")
    env = data.get("env")
    env_name = env.get("name") if isinstance(env, dict) else None
    if not isinstance(env_name, str):
        env_name = EnvConfig().name  # the library's default env (a named preset has its own)
    device = env.get("device") if isinstance(env, dict) else None
    if not isinstance(device, str):
        device = EnvConfig().device  # `EnvConfig` reports a device that is not a string
    name = algorithm_name(data)
    try:
        algorithm_spec(name)
    except UnknownAlgorithmError:
        return PresetChoice("no preset")  # `_parse_algorithm` reports the name
    return choose_preset(preset, env_name, name, device)


def with_preset(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`data` laid over its preset's values, key by key (see `Params.preset`); or the error.

    A mapping in the file merges into the preset's mapping; any other value (null included)
    replaces it. An `env.name` other than the preset's drops the preset's `env.options`.
    """
    try:
        choice = preset_choice(data)
    except ValueError as exc:
        return data, [f"preset: {exc}"]
    if choice.config is None:
        return data, []
    base = preset_layer(choice, algorithm_name(data))
    env = data.get("env")
    if isinstance(env, dict) and "name" in env and env["name"] != base["env"].get("name"):
        base["env"].pop("options", None)
    merged = dict(data)
    for section in PRESET_SECTIONS:
        given = data.get(section)
        merged[section] = _merge(base[section], {} if given is None else given)
    return merged, []


def preset_layer(choice: PresetChoice, algorithm: str) -> dict[str, Any]:
    """A preset's experiment as params.yaml sections for `algorithm` (a generic one without
    its env's name, options and stop targets). An algorithm that takes another's presets
    gets the algorithm settings its config shares with the preset's by name."""
    cfg = choice.config
    assert cfg is not None
    settings = algorithm_settings(cfg, algorithm)
    layer = {
        "env": asdict(cfg.env),
        "policy": asdict(cfg.policy),
        "algorithm": {"name": algorithm, section_name(algorithm): settings},
        "trainer": asdict(cfg.trainer),
        "replay": asdict(cfg.replay),
    }
    del layer["trainer"]["seed"]
    if choice.generic:
        for key in ("name", "options"):
            del layer["env"][key]
        layer["trainer"]["stop_at_eval_return"] = None
        layer["trainer"]["stop_at_eval_success"] = None
    return plain_data(layer)


def plain_data(value: Any) -> Any:
    """Nested data with tuples as lists, as YAML gives them."""
    if isinstance(value, dict):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_data(v) for v in value]
    return value


def _merge(base: Any, given: Any) -> Any:
    if isinstance(base, dict) and isinstance(given, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in given.items()}}
    return given
