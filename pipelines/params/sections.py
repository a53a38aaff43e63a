"""The `Params` model: the experiment's sections, each a pydantic model wrapping rlcore's own
config dataclasses (which check their ranges in `__post_init__`), and the stages' own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

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

from pipelines.params.errors import describe_errors
from rlcore.algos.config import AUTO_COMPILE_MIN_STEPS
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
from rlcore.presets import AUTO


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
    compile: bool | Literal["auto"] = Field(
        "auto",
        description="compile the updates with torch.compile (needs a C++ compiler on CPU, "
        "Triton on CUDA): PPO's whole minibatch step (CUDA graphs on CUDA; metrics read from "
        "the device only every log_every_iters), GRPO's loss, SAC's update (one function on "
        "CPU); seconds to compile. auto: where it pays back, with no stop target and the compiler "
        f"present: PPO's step in a run planned for at least {AUTO_COMPILE_MIN_STEPS:,d} "
        "minibatch steps (on 20 fresh Hopper-v5 seeds compiled runs returned as much as eager "
        "ones, over all 40 2,675 against 2,905: within seed noise, for ~0.63x the CPU; "
        "benchmarks/README.md, compile_returns); SAC stays eager (on 10 fresh "
        "HumanoidStandup-v5 seeds compiled runs returned less: benchmarks/README.md, suite)",
    )

    @field_validator("log_every_iters")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be >= 1 or auto, got {value}")
        return value

    def compiles(self, cfg: ExperimentConfig, world_size: int = 1) -> tuple[bool, str]:
        """Whether `cfg` trains compiled, and why for `auto` (`rlcore.algos.compile`)."""
        if self.compile == "auto":
            from rlcore.algos.compile import compile_pays  # imports torch: a stage's choice

            return compile_pays(cfg, world_size)
        return self.compile, ""

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
