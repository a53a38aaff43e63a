"""`params.yaml`: the whole experiment, read and validated once, before any compute.

The sections wrap rlcore's own config dataclasses (which check their ranges in
`__post_init__`), so the library and the pipeline validate with the same rules. Every error
names its location, e.g. `algorithm.ppo.clip_eps: must be > 0, got -1.0`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlcore.algos.config import GRPOConfig, PPOConfig
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig, TrainerConfig

DEFAULT_PATH = Path("params.yaml")


class ParamsError(ValueError):
    """`params.yaml` is missing, malformed or invalid; `lines` says where and why."""

    def __init__(self, path: Path, lines: list[str]) -> None:
        self.path, self.lines = path, lines
        super().__init__("\n".join(f"{path}: {line}" for line in lines))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlgorithmParams(_Section):
    """Which algorithm trains the policy, and its settings (only `name`'s section is used)."""

    name: Literal["ppo", "grpo"] = "ppo"
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)


class RuntimeParams(_Section):
    threads: int = Field(1, ge=1, description="torch CPU threads (1 is fastest for small MLPs)")


class EvaluationParams(_Section):
    """The `evaluate` stage: deterministic episodes on seeds training never used."""

    episodes: int = Field(64, ge=1)
    seed: int = Field(1_000_000, ge=0)


class VideoParams(_Section):
    """The `video` stage: `episodes` evaluation episodes, tiled in one MP4."""

    episodes: int = Field(4, ge=1, le=64)
    columns: int = Field(2, ge=1)
    frame_size: int = Field(160, ge=32, le=1024)
    fps: int = Field(50, ge=1, le=240)
    max_steps: int | None = Field(None, ge=1, description="default: the env's time limit")
    seed: int = Field(2_000_000, ge=0)


class ScheduleParams(_Section):
    """When `python -m pipelines serve` re-runs the experiment flow."""

    cron: str = "0 3 * * *"
    timezone: str = "UTC"
    deployment: str = "nightly"

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError(f"must be a 5-field cron expression, got {value!r}")
        return value


class Params(_Section):
    """The whole experiment (see `params.yaml` for the defaults with comments)."""

    name: str = Field("experiment", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    env: EnvConfig = Field(default_factory=EnvConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    algorithm: AlgorithmParams = Field(default_factory=AlgorithmParams)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    runtime: RuntimeParams = Field(default_factory=RuntimeParams)
    evaluation: EvaluationParams = Field(default_factory=EvaluationParams)
    video: VideoParams = Field(default_factory=VideoParams)
    schedule: ScheduleParams = Field(default_factory=ScheduleParams)

    def experiment(self) -> ExperimentConfig:
        """The rlcore configuration of the training run (its hash guards checkpoints)."""
        return ExperimentConfig(
            env=self.env,
            policy=self.policy,
            ppo=self.algorithm.ppo,
            trainer=self.trainer,
            algorithm=self.algorithm.name,
            grpo=self.algorithm.grpo,
        )


# rlcore's dataclasses raise "section.field must be ...": lift the field into the location.
_LIBRARY_MESSAGE = re.compile(r"^(?:Value error, )?(\w+)\.(\w+) (.*)$", re.DOTALL)


def describe_errors(error: ValidationError) -> list[str]:
    """One `location: message` line per problem."""
    lines = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        message = item["msg"]
        match = _LIBRARY_MESSAGE.match(message)
        if match and loc and match.group(1) == loc[-1]:
            loc.append(match.group(2))
            message = match.group(3)
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        if item["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            message = "unknown key (check the spelling against params.yaml's documented keys)"
        lines.append(f"{'.'.join(loc) or '<top level>'}: {message}")
    return lines


def parse_params(data: object, path: Path = DEFAULT_PATH) -> Params:
    """Validate an already-loaded mapping."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(path, [f"<top level>: must be a mapping, got {type(data).__name__}"])
    try:
        params = Params.model_validate(data)
    except ValidationError as exc:
        raise ParamsError(path, describe_errors(exc)) from None
    try:  # rules that span sections, e.g. grpo.group_size must divide env.num_envs
        params.experiment()
    except ValueError as exc:
        match = _LIBRARY_MESSAGE.match(str(exc))
        if match is None:
            raise ParamsError(path, [str(exc)]) from None
        section, field, message = match.groups()
        raise ParamsError(path, [f"algorithm.{section}.{field}: {message}"]) from None
    return params


def load_params(path: str | Path = DEFAULT_PATH) -> Params:
    """Read and validate `params.yaml`; any problem raises `ParamsError`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ParamsError(path, [f"cannot be read ({exc.strerror or exc})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ParamsError(path, [f"{where}malformed YAML ({problem})"]) from None
    return parse_params(data, path)
