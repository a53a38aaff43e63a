"""rlcore: batched environments, PPO, GRPO and SAC over one preallocated rollout.

The public API, importable from `rlcore` (docs/library.md has examples):

- `experiment_for(env_name, algorithm, preset, seed)`: the experiment params.yaml's
  `preset: auto` gives an env and algorithm (the env's own or its family's settings);
- the configuration dataclasses: `ExperimentConfig`, `EnvConfig`, `PolicyConfig`,
  `TrainerConfig`, `ReplayConfig`, `PPOConfig`, `GRPOConfig`, `SACConfig`;
- `Trainer(cfg, sink)`: trains (`run`), saves and resumes; `sink(env_steps, metrics)` sees
  every iteration's metrics;
- `configure_cpu(threads=1)`: one torch thread, as the pipeline's stages use; call it first:
  torch's default of one thread per core makes small-network training several times
  slower (benchmarks/README.md, *library_vs_stage*);
- `make_env(EnvConfig)`, `evaluate_policy(policy, env, seed)`, `load_trained_policy(cfg, path)`.

Names are imported on first use, so `import rlcore.config` stays free of torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "experiment_for": "rlcore.presets",
    "ExperimentConfig": "rlcore.config",
    "EnvConfig": "rlcore.config",
    "PolicyConfig": "rlcore.config",
    "TrainerConfig": "rlcore.config",
    "ReplayConfig": "rlcore.config",
    "PPOConfig": "rlcore.algos.config",
    "GRPOConfig": "rlcore.algos.config",
    "SACConfig": "rlcore.algos.sac_config",
    "Trainer": "rlcore.trainer",
    "configure_cpu": "rlcore.runtime",
    "make_env": "rlcore.envs",
    "evaluate_policy": "rlcore.evaluate:evaluate",  # `rlcore.evaluate` is its module
    "load_trained_policy": "rlcore.trained",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rlcore' has no attribute {name!r}")
    module, _, attribute = module.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value  # once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
