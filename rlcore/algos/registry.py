"""The algorithm registry: the one way an experiment names and configures its algorithm.

An algorithm registers, in its own module, its name, its config class (a frozen dataclass
that checks its ranges in `__post_init__`) and its factory (the algorithm class, named as
`"module:attr"` so that reading or validating a config never imports torch). The trainer,
`ExperimentConfig` and `pipelines/params.py` look names up here and never list them.

Names are either registered ones (`ppo`, `grpo`, `sac`) or `"package.module:name"`: the module
is imported (it registers `name`), as Gymnasium does for `module:EnvId`. So a user's own
algorithm trains from `params.yaml` with no change to this package::

    # my_pkg/reinforce.py
    register_algorithm(AlgorithmSpec("reinforce", ReinforceConfig, "my_pkg.reinforce:Reinforce"))

    # params.yaml
    algorithm: {name: "my_pkg.reinforce:reinforce", reinforce: {lr: 0.001}}
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rlcore.algos.base import missing_members
from rlcore.errors import ConfigError

# Modules that register the builtin algorithms; imported on the first lookup (torch-free).
_BUILTIN_MODULES = ("rlcore.algos.config", "rlcore.algos.sac_config")
_REGISTRY: dict[str, AlgorithmSpec] = {}
_loaded_builtins = False


@dataclass(frozen=True)
class ReportedSettings:
    """What a run's report says of its algorithm's config: the parts of its optimizer line
    (`"lr 0.001 (constant)"`, `"gamma 0.99"`, ...) and a summary of the rest, if any."""

    optimizer: tuple[str, ...] = ()
    summary: str | None = None


@runtime_checkable
class ReportedConfig(Protocol):
    """An algorithm config that declares what reports show of it (every builtin one)."""

    def report(self) -> ReportedSettings:
        """What the run report shows of these settings."""
        ...


def reported_settings(config: Any) -> ReportedSettings:
    """What reports show of an algorithm config: its own `report()`, or nothing for a
    config of an algorithm from outside this package that declares none."""
    return config.report() if isinstance(config, ReportedConfig) else ReportedSettings()


class UnknownAlgorithmError(ValueError):
    """An algorithm name that is neither registered nor an importable `module:name`."""


@dataclass(frozen=True)
class AlgorithmSpec:
    """A registered algorithm.

    `config`: its frozen config dataclass, the `algorithm.<name>` section of params.yaml;
    it may define `check_experiment(experiment)` for rules that span sections (e.g. GRPO's
    group size must divide the number of envs), and `report()` returning the
    `ReportedSettings` a run's report shows of it (`ReportedConfig`; none: nothing shown).
    `factory`: `"module:attr"` of the algorithm class (see `rlcore.algos.base.Algorithm` for
    what it provides). `policy` (optional): `"module:attr"` of its `make_policy` alone,
    so that evaluation and videos build the trained policy without importing the training
    code; by default the class's.
    `presets_from` (optional): the builtin algorithm whose presets this one takes, e.g.
    `"ppo"` for a PPO variant (`rlcore.presets.choose_preset`): a preset gives it that
    preset's env, policy, trainer and replay settings, and of its algorithm settings those
    `config` has a field of the same name for (the others keep `config`'s defaults).
    """

    name: str
    config: type
    factory: str
    policy: str | None = None
    presets_from: str | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"algorithm names are identifiers, got {self.name!r}")
        if self.presets_from is not None and not self.presets_from.isidentifier():
            raise ValueError(f"presets_from names an algorithm, got {self.presets_from!r}")
        for field, path in (("factory", self.factory), ("policy", self.policy or ":")):
            if ":" not in path:
                raise ValueError(f"{field} must be 'module:attr', got {path!r}")

    def load(self) -> Any:
        """Import and return the algorithm class (this imports torch); ConfigError when it
        lacks a member of the contract the Trainer relies on (`rlcore.algos.base`)."""
        cls = _attribute(self.factory)
        missing = missing_members(cls)
        if missing:
            raise ConfigError(
                f"algorithm {self.name!r} ({self.factory}) lacks {', '.join(missing)}: "
                f"see rlcore.algos.base.Algorithm for what the trainer calls (e.g. "
                f"rank_state_dict returning {{}} where nothing differs between ranks)"
            )
        return cls

    def load_policy_factory(self) -> Any:
        """`make_policy(obs_spec, action_space, policy_cfg, algo_cfg)` of the algorithm,
        from `policy` when given (lighter), else from the algorithm class."""
        return _attribute(self.policy) if self.policy else self.load().make_policy


def _attribute(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Register `spec` under its name; registering the same name twice is an error."""
    known = _REGISTRY.get(spec.name)
    if known is not None and known != spec:
        raise ValueError(f"algorithm {spec.name!r} is already registered ({known.factory})")
    _REGISTRY[spec.name] = spec
    return spec


def _load_builtins() -> None:
    global _loaded_builtins
    if not _loaded_builtins:
        _loaded_builtins = True
        for module in _BUILTIN_MODULES:
            importlib.import_module(module)


def section_name(name: str) -> str:
    """The params section of an algorithm name: `ppo` -> `ppo`, `pkg.mod:algo` -> `algo`."""
    return name.rpartition(":")[2]


def algorithm_spec(name: str) -> AlgorithmSpec:
    """Look `name` up, importing `module` first for a `module:name` name."""
    _load_builtins()
    module, _, short = name.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownAlgorithmError(
                f"algorithm.name {name!r}: cannot import module {module!r} ({exc})"
            ) from None
    spec = _REGISTRY.get(short)
    if spec is None:
        where = f"module {module!r} registers no algorithm {short!r}; " if module else ""
        raise UnknownAlgorithmError(
            f"algorithm.name {name!r}: {where}choose one of {algorithm_names()} or "
            f"'package.module:name' for an algorithm your own module registers"
        )
    return spec


def algorithm_names() -> list[str]:
    """Every registered name, sorted (builtins and those registered so far)."""
    _load_builtins()
    return sorted(_REGISTRY)


def default_config(name: str) -> Any:
    """The default config of algorithm `name`."""
    return algorithm_spec(name).config()
