"""`params.yaml`: the whole experiment, read and validated once, before any compute.

The sections wrap rlcore's own config dataclasses (which check their ranges in
`__post_init__`), so the library and the pipeline validate with the same rules. Every error
names its location, e.g. `algorithm.ppo.clip_eps: must be > 0, got -1.0`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from pipelines.bounded import BoundedInputError, load_yaml, read_text
from rlcore.algos.registry import (
    UnknownAlgorithmError,
    algorithm_names,
    algorithm_spec,
    section_name,
)
from rlcore.config import (
    EnvConfig,
    ExperimentConfig,
    PolicyConfig,
    ReplayConfig,
    TrainerConfig,
)
from rlcore.presets import AUTO, PresetChoice, algorithm_settings, choose_preset

DEFAULT_PATH = Path("params.yaml")
# The sections a preset fills (the experiment itself; the stages' own sections have no preset).
PRESET_SECTIONS = ("env", "policy", "algorithm", "trainer", "replay")


class ParamsError(ValueError):
    """`params.yaml` is missing, malformed or invalid; `lines` says where and why."""

    def __init__(self, path: Path, lines: list[str]) -> None:
        self.path, self.lines = path, lines
        super().__init__("\n".join(f"{path}: {line}" for line in lines))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlgorithmParams(_Section):
    """`algorithm: {name, <section>, ...}`: which registered algorithm trains the policy
    (`rlcore.algos.registry`), and the settings of any registered algorithm by its name;
    only `name`'s section is used. The sections' types come from the registry: see
    `algorithm_params`, which builds this model's concrete subclass."""

    name: str = "ppo"

    @property
    def section(self) -> str:
        return section_name(self.name)

    @property
    def config(self) -> Any:
        """The config of the algorithm `name` (its defaults if its section is absent)."""
        settings = getattr(self, self.section, None)
        return algorithm_spec(self.name).config() if settings is None else settings


def algorithm_params(name: str) -> type[AlgorithmParams]:
    """The `algorithm` section's model: a section per registered algorithm, and for a
    `module:name` algorithm its own (imported first, which registers it)."""
    algorithm_spec(name)  # imports a user's module, or raises UnknownAlgorithmError
    specs = [algorithm_spec(known) for known in algorithm_names()]
    sections: dict[str, Any] = {spec.name: (spec.config | None, None) for spec in specs}
    return create_model("AlgorithmParams", __base__=AlgorithmParams, **sections)


def _parse_algorithm(data: Any) -> tuple[AlgorithmParams | None, list[str]]:
    """Validate the `algorithm` section; return it, or the error lines."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        name = data if isinstance(data, str) else "ppo"
        return None, [
            f"algorithm: must be a mapping; write `algorithm: {{name: {name}, {name}: "
            f"{{...settings}}}}` (the algorithm's settings under its own name)"
        ]
    if "cfg" in data:
        return None, [
            "algorithm.cfg: an EmbodiChain-style section; write the settings under "
            "`algorithm.<name>` or convert the file with `python -m pipelines import-config`"
        ]
    name = data.get("name", "ppo")
    if not isinstance(name, str):
        return None, [f"algorithm.name: must be a string, got {name!r}"]
    try:
        model = algorithm_params(name)
    except UnknownAlgorithmError as exc:
        return None, [str(exc).replace("algorithm.name ", "algorithm.name: ", 1)]
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, describe_errors(exc, prefix=["algorithm"])


LOG_EVERY_ENV_STEPS = 1_000  # `log_every_iters: auto` logs about this often


class RuntimeParams(_Section):
    threads: int = Field(
        1, ge=1, description="torch CPU threads per process (1 is fastest for small MLPs)"
    )
    processes: int = Field(
        1,
        ge=1,
        description="train with this many torch.distributed processes on this machine "
        "(torchrun; each with env.num_envs envs); ignored when launched by torchrun",
    )
    tensorboard: bool = Field(
        True,
        description="write every iteration's metrics as TensorBoard events to "
        "outputs/tensorboard/<run>/seed_<S> (`tensorboard --logdir outputs/tensorboard`)",
    )
    dvclive: bool = Field(
        True,
        description="write every iteration's metrics with DVCLive to metrics/seeds/<S>/live "
        "(`dvc plots show`, `dvc exp show`, DVC's live view)",
    )
    log_every_iters: int | Literal["auto"] = Field(
        "auto",
        description="log the mean of each training metric over this many iterations; auto: "
        f"the fewest that span {LOG_EVERY_ENV_STEPS:,d} env steps (1 for PPO's long "
        "rollouts, 1,000 for a 1-env SAC iteration of one step)",
    )
    compile: bool = Field(
        False,
        description="compile the updates with torch.compile (needs a C++ compiler on CPU, "
        "Triton on CUDA): PPO's whole minibatch step (CUDA graphs on CUDA; metrics read from "
        "the device only every log_every_iters), GRPO's loss, SAC's losses on CUDA; seconds "
        "to compile",
    )

    @field_validator("log_every_iters")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be >= 1 or auto, got {value}")
        return value

    def log_every(self, env_steps_per_iter: int) -> int:
        """Iterations per logged point: `log_every_iters`, or for auto the fewest that span
        `LOG_EVERY_ENV_STEPS` env steps."""
        if self.log_every_iters != "auto":
            return int(self.log_every_iters)
        return max(1, math.ceil(LOG_EVERY_ENV_STEPS / env_steps_per_iter))


class EvaluationParams(_Section):
    """The `evaluate` stage: deterministic episodes on seeds training never used."""

    episodes: int = Field(64, ge=1)
    seed: int = Field(1_000_000, ge=0)
    checkpoint: Literal["final", "best"] = Field(
        "final",
        description="the policy `evaluate` and `video` use: the end of training, or the best "
        "evaluation during it (best.pt)",
    )


class VideoParams(_Section):
    """The `video` stage: `episodes` evaluation episodes, tiled in one MP4."""

    episodes: int = Field(4, ge=1, le=64)
    columns: int = Field(2, ge=1)
    frame_size: int = Field(160, ge=32, le=1024)
    fps: int = Field(50, ge=1, le=240)
    max_steps: int | None = Field(None, ge=1, description="default: the env's time limit")
    seed: int = Field(2_000_000, ge=0)
    agent_view: bool = Field(
        True, description="beside each scene, the camera images the actor reads (if any)"
    )


class CollectParams(_Section):
    """The `collect` stage (`data/dvc.yaml`): an offline dataset for `replay.offline`."""

    policy: Literal["trained", "random"] = Field(
        "trained",
        description="trained: the first seed's final checkpoint, sampling its actions; "
        "random: uniform actions (Box action spaces)",
    )
    env_steps: int = Field(100_000, ge=1)
    seed: int = Field(3_000_000, ge=0, description="env and action seed, apart from training's")
    output: str = Field("data/offline", min_length=1, description="the dataset directory")
    allow_outside_repo: bool = Field(
        False, description="let `output` resolve outside the repository (after symlinks)"
    )


class ScheduleParams(_Section):
    """When `python -m pipelines serve` runs a flow, and which: the regression check (the
    experiment on fresh seeds, judged against the baseline) or the plain pipeline
    (`dvc repro`, new work only when an input changed, e.g. a dataset updated upstream)."""

    cron: str = "0 3 * * *"
    timezone: str = "UTC"
    deployment: str = "nightly"
    flow: Literal["regression", "experiment"] = "regression"

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError(f"must be a 5-field cron expression, got {value!r}")
        return value


def flatten_paths(
    tree: dict[str, Any], is_leaf: Callable[[dict[str, Any]], bool], prefix: str = ""
) -> dict[str, Any]:
    """Nested mappings as `a.b.c: leaf`; a mapping `is_leaf` accepts is a value."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not is_leaf(value):
            flat |= flatten_paths(value, is_leaf, f"{path}.")
        else:
            flat[path] = value
    return flat


class Params(_Section):
    """The whole experiment (`docs/params-reference.yaml` documents every key)."""

    name: str = Field("experiment", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    preset: str = Field(
        AUTO,
        description="where the keys this file leaves out come from: auto (the env's own "
        "preset, else its task family's, else the library's defaults), none (the library's), "
        "or a preset of rlcore.presets for the chosen algorithm (for one of your own, of the "
        "algorithm its AlgorithmSpec names in presets_from)",
    )
    seeds: list[int] = Field(
        default_factory=lambda: [0],
        min_length=1,
        description="training seeds: `dvc repro` trains and evaluates one run per seed",
    )
    env: EnvConfig = Field(default_factory=EnvConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    algorithm: SerializeAsAny[AlgorithmParams] = Field(
        default_factory=lambda: algorithm_params("ppo")()
    )
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    runtime: RuntimeParams = Field(default_factory=RuntimeParams)
    evaluation: EvaluationParams = Field(default_factory=EvaluationParams)
    video: VideoParams = Field(default_factory=VideoParams)
    collect: CollectParams = Field(default_factory=CollectParams)
    schedule: ScheduleParams = Field(default_factory=ScheduleParams)
    # Read by the search alone (`pipelines.search.space` validates it), so that its schema is
    # none of the stages' DVC dependencies.
    search: dict[str, Any] = Field(
        default_factory=dict, description="the search's study (pipelines.search.space)"
    )

    @field_validator("name")
    @classmethod
    def _a_folder_of_its_own(cls, value: str) -> str:
        if value in (".", ".."):  # it would name outputs/tensorboard/<name>'s parent
            raise ValueError(f"{value!r} is not a name; use letters, digits, '_', '.' or '-'")
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if any(seed < 0 for seed in value):
            raise ValueError(f"must be >= 0, got {value}")
        if len(set(value)) != len(value):
            raise ValueError(f"must be distinct, got {value}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_trainer_seed(cls, data: Any) -> Any:
        trainer = data.get("trainer") if isinstance(data, dict) else None
        if isinstance(trainer, dict) and "seed" in trainer:
            raise ValueError("trainer.seed moved to the top-level `seeds` list (one run per seed)")
        return data

    def experiment(self, seed: int | None = None) -> ExperimentConfig:
        """The rlcore configuration of one training run (its hash guards checkpoints).

        `seed` is one of `seeds` (default: the first).
        """
        seed = self.seeds[0] if seed is None else seed
        return ExperimentConfig(
            env=self.env,
            policy=self.policy,
            trainer=replace(self.trainer, seed=seed),
            algorithm=self.algorithm.name,
            algo=self.algorithm.config,
            replay=self.replay,
        )


# rlcore's dataclasses raise "section.field must be ...": lift the field into the location.
_LIBRARY_MESSAGE = re.compile(r"^(?:Value error, )?(\w+)\.(\w+) (.*)$", re.DOTALL)


def describe_errors(error: ValidationError, prefix: list[str] | None = None) -> list[str]:
    """One `location: message` line per problem (`prefix`: where the model sits)."""
    lines = []
    for item in error.errors():
        loc = [*(prefix or []), *(str(part) for part in item["loc"])]
        message = item["msg"]
        match = _LIBRARY_MESSAGE.match(message)
        if match and (not loc or match.group(1) == loc[-1]):
            loc = loc or [match.group(1)]
            loc.append(match.group(2))
            message = match.group(3)
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        if item["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            message = "unknown key (check the spelling against docs/params-reference.yaml)"
        lines.append(f"{'.'.join(loc) or '<top level>'}: {message}")
    return lines


def parse_params(data: object, path: Path = DEFAULT_PATH) -> Params:
    """Validate an already-loaded mapping. Its `search` section is left as data: only the
    search reads it (`pipelines.search.space.checked_search`), so a space written for another
    algorithm (`algorithm.ppo.lr` after `-S algorithm.name=sac`) never stops training."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(path, [f"<top level>: must be a mapping, got {type(data).__name__}"])
    errors = _old_layout_errors(data)
    if not errors:
        data, errors = with_preset(data)
    if errors:
        raise ParamsError(path, errors)
    algorithm, algorithm_errors = _parse_algorithm(data.get("algorithm"))
    errors += algorithm_errors
    skip = {"algorithm", *algorithm_names()}
    rest = {key: value for key, value in data.items() if key not in skip}
    try:
        params = Params.model_validate(rest)
    except ValidationError as exc:
        errors += describe_errors(exc)
    if errors:
        raise ParamsError(path, errors)
    if algorithm is not None:
        params = params.model_copy(update={"algorithm": algorithm})
    errors = strict_number_errors(data, params.model_dump(), [])
    if errors:
        raise ParamsError(path, errors)
    try:  # rules that span sections, e.g. grpo.group_size must divide env.num_envs
        params.experiment()
    except ValueError as exc:
        raise ParamsError(path, [_cross_section_line(exc)]) from None
    return params


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
    name = algorithm_name(data)
    try:
        algorithm_spec(name)
    except UnknownAlgorithmError:
        return PresetChoice("no preset")  # `_parse_algorithm` reports the name
    return choose_preset(preset, env_name, name)


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


def strict_number_errors(raw: Any, validated: Any, loc: list[str]) -> list[str]:
    """What lax validation let through: a boolean taken for a number (`num_envs: true` would
    train 1 env), and numbers that are not finite (`.inf`, `.nan`, `1e999`) anywhere.

    Walks the file's values beside the validated ones; numeric strings stay accepted
    (PyYAML reads `3e-4` as a string).
    """
    where = ".".join(loc) or "<top level>"
    if isinstance(raw, dict) and isinstance(validated, dict):
        return [
            error
            for key, value in raw.items()
            if key in validated
            for error in strict_number_errors(value, validated[key], [*loc, str(key)])
        ]
    if isinstance(raw, list | tuple) and isinstance(validated, list | tuple):
        return [
            error
            for i, (value, checked) in enumerate(zip(raw, validated, strict=False))
            for error in strict_number_errors(value, checked, [*loc, str(i)])
        ]
    if isinstance(raw, bool) and isinstance(validated, int | float) and validated is not raw:
        return [f"{where}: must be a number, got {str(raw).lower()} (a boolean)"]
    if isinstance(validated, float) and not math.isfinite(validated):
        return [f"{where}: must be a finite number, got {raw!r}"]
    return []


def _old_layout_errors(data: dict[str, Any]) -> list[str]:
    """A registered algorithm's settings at the top level: say where they live now."""
    return [
        f"{name}: algorithm settings live under `algorithm.{name}`; write "
        f"`algorithm: {{name: {name}, {name}: {{...}}}}`"
        for name in algorithm_names()
        if name in data
    ]


def _cross_section_line(exc: ValueError) -> str:
    match = _LIBRARY_MESSAGE.match(str(exc))
    if match is None:
        return str(exc)
    section, field, message = match.groups()
    if section in ("env", "policy", "trainer", "replay"):
        return f"{section}.{field}: {message}"
    return f"algorithm.{section}.{field}: {message}"


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested mapping, creating the intermediate mappings."""
    *parents, leaf = dotted.split(".")
    for key in parents:
        if data.get(key) is None:  # absent, or an algorithm section left out (null)
            data[key] = {}
        data = data[key]
    data[leaf] = value


def apply_values(params: Params, values: dict[str, Any]) -> Params:
    """`params` with dotted-path `values` applied, validated exactly like params.yaml."""
    data = params.model_dump(mode="json")
    del data["trainer"]["seed"]  # the seeds are the top-level `seeds`
    for dotted, value in values.items():
        set_path(data, dotted, value)
    return parse_params(data)


def load_params(path: str | Path = DEFAULT_PATH) -> Params:
    """Read and validate `params.yaml`; any problem raises `ParamsError`."""
    path = Path(path)
    try:
        text = read_text(path)
    except OSError as exc:
        raise ParamsError(path, [f"cannot be read ({exc.strerror or exc})"]) from None
    except BoundedInputError as exc:
        raise ParamsError(path, [str(exc)]) from None
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        raise ParamsError(
            path, ["is empty: it must hold the experiment (start from the project's params.yaml)"]
        )
    try:
        data = load_yaml(text)  # no aliases, bounded depth: a shared file cannot exhaust memory
    except BoundedInputError as exc:
        raise ParamsError(path, [str(exc)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ParamsError(path, [f"{where}malformed YAML ({problem})"]) from None
    return parse_params(data, path)
