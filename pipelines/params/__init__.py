"""`params.yaml`: the whole experiment, read and validated once, before any compute.

The sections wrap rlcore's own config dataclasses (which check their ranges in
`__post_init__`), so the library and the pipeline validate with the same rules. Every error
names its location, e.g. `algorithm.ppo.clip_eps: must be > 0, got -1.0`.

A module per job: `sections` (the `Params` model), `presets` (preset layering), `errors`
(`ParamsError` and the error lines), `load` (reading and validating the file).
"""

from pipelines.params.errors import ParamsError, describe_errors, strict_number_errors
from pipelines.params.load import DEFAULT_PATH, apply_values, load_params, parse_params, set_path
from pipelines.params.presets import (
    PRESET_SECTIONS,
    algorithm_name,
    plain_data,
    preset_choice,
    preset_layer,
    with_preset,
)
from pipelines.params.sections import (
    LOG_EVERY_ENV_STEPS,
    AlgorithmParams,
    CollectParams,
    EvaluationParams,
    Params,
    RuntimeParams,
    ScheduleParams,
    VideoParams,
    algorithm_params,
    flatten_paths,
)

__all__ = [
    "DEFAULT_PATH",
    "LOG_EVERY_ENV_STEPS",
    "PRESET_SECTIONS",
    "AlgorithmParams",
    "CollectParams",
    "EvaluationParams",
    "Params",
    "ParamsError",
    "RuntimeParams",
    "ScheduleParams",
    "VideoParams",
    "algorithm_name",
    "algorithm_params",
    "apply_values",
    "describe_errors",
    "flatten_paths",
    "load_params",
    "parse_params",
    "plain_data",
    "preset_choice",
    "preset_layer",
    "set_path",
    "strict_number_errors",
    "with_preset",
]
