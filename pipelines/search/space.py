"""A params file's `search` section: the study's schema, read by the search alone.

The experiment's stages never read `search`, so nothing here is among their DVC
dependencies: editing the search's schema or its checks retrains nothing. `Params` holds the
section as plain data; `search_section` validates its shape (cheap: wherever the search
needs it), `checked_search` also checks every searched path and extreme value against the
experiment (once, where a search or `python -m pipelines params` starts).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pipelines.params import (
    DEFAULT_PATH,
    Params,
    ParamsError,
    apply_values,
    describe_errors,
    flatten_paths,
    strict_number_errors,
)
from rlcore.algos.registry import algorithm_names


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchDimension(_Section):
    """One searched parameter: a float or int range (optionally log-scale), or choices."""

    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = Field(None, gt=0)
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SearchDimension:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("categorical needs a non-empty `choices` list")
            if self.low is not None or self.high is not None or self.log:
                raise ValueError("categorical takes only `choices` (no low/high/log)")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"{self.type} needs `low` and `high`")
        if self.choices is not None:
            raise ValueError(f"{self.type} takes `low`/`high`, not `choices`")
        if not self.low < self.high:
            raise ValueError(f"empty range: low ({self.low:g}) must be < high ({self.high:g})")
        if self.log and self.low <= 0:
            raise ValueError(f"a log-scale range must be > 0, got low={self.low:g}")
        if self.log and self.step is not None:
            raise ValueError("`step` cannot be combined with `log`")
        if self.type == "int" and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError("int ranges need integer `low` and `high`")
        return self

    def contains(self, value: Any) -> bool:
        """Whether Optuna could draw `value` from this dimension (for enqueued trials)."""
        if self.type == "categorical":
            return value in (self.choices or [])
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.type == "int" and not float(value).is_integer():
            return False
        assert self.low is not None and self.high is not None
        return self.low <= value <= self.high

    def describe(self) -> str:
        if self.type == "categorical":
            return f"choices {self.choices}"
        return f"{self.type} range [{self.low:g}, {self.high:g}]"

    def extremes(self) -> list[Any]:
        """The values validated before any trial: both ends of a range, or every choice."""
        if self.type == "categorical":
            return list(self.choices or [])
        ends = [self.low, self.high]
        return [int(v) for v in ends] if self.type == "int" else ends


class SearchTask(_Section):
    """One env a multi-task study trains every trial on (`search.tasks`), and how its return
    is normalised so that tasks of different reward scales average: score = (return - low) /
    (high - low), e.g. low a random policy's return and high a reference's (a baseline's
    mean), so 0 is random and 1 the reference."""

    env: str = Field(min_length=1, description="the env's name, as env.name takes it")
    low: float = Field(description="the return that scores 0 (e.g. a random policy's)")
    high: float = Field(description="the return that scores 1 (e.g. a reference's mean)")

    @model_validator(mode="after")
    def _distinct(self) -> SearchTask:
        if self.high == self.low:
            raise ValueError(f"{self.env}: high and low are both {self.low:g}: no scale")
        return self

    def score(self, value: float) -> float:
        return (value - self.low) / (self.high - self.low)


SEARCHABLE_SECTIONS = ("env", "policy", "algorithm", "trainer", "replay")


def is_journal_path(storage: str) -> bool:
    """Whether `search.storage` names a journal file (a path) rather than a database (a URL,
    which always has a scheme: `postgresql+psycopg://...`, `sqlite:///...`)."""
    return "://" not in storage


class SearchParams(_Section):
    """`python -m pipelines search`: an Optuna study over `space` (see params.yaml)."""

    study_name: str = Field("search", min_length=1)
    space: dict[str, SearchDimension] = Field(default_factory=dict)
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="applied to every trial before the sampled values"
    )
    eval_every_env_steps: int | None = Field(
        None,
        ge=1,
        description="evaluate each trial every this many env steps (its eval_every_iters "
        "set to match) and report to the pruner by env steps, so trials whose iterations "
        "differ in size (a searched num_envs or num_steps) are compared at the same steps; "
        "null: trainer.eval_every_iters, reported by evaluation index",
    )
    enqueue: list[dict[str, Any]] = Field(
        default_factory=list,
        description="trials that run first, in order (e.g. published settings): each maps "
        "searched paths to values inside their ranges; paths it leaves out are sampled",
    )
    min_minibatch_size: int | None = Field(
        None,
        ge=1,
        description="PPO and GRPO: a trial whose num_envs x num_steps / num_minibatches is "
        "below this is pruned before it trains (a space that searches both can otherwise "
        "draw minibatches of a few samples, whose trial runs for hours); null: no floor",
    )
    sampler: Literal["tpe", "random", "cmaes"] = "tpe"
    seed: int = Field(0, ge=0)
    pruner: Literal["median", "successive_halving", "none"] = "median"
    startup_trials: int = Field(4, ge=0, description="trials before the median pruner acts")
    warmup_evals: int = Field(1, ge=0, description="evaluations a trial runs before pruning")
    n_trials: int = Field(16, ge=1)
    timeout_s: float | None = Field(None, gt=0)
    objective: Literal["return", "success"] = "return"
    objective_evals: int = Field(
        1,
        ge=1,
        description="a trial's value per seed: the mean of its last this many evaluations "
        "(1: the final one); more smooths an evaluation that swings from one to the next",
    )
    direction: Literal["maximize", "minimize"] = "maximize"
    seeds_per_trial: int = Field(1, ge=1)
    tasks: list[SearchTask] = Field(
        default_factory=list,
        description="a study across tasks: every trial trains on each of these envs (each "
        "seeds_per_trial times, env.name replaced, the rest of its config as for env.name), "
        "and its value is the mean of the normalised scores (SearchTask); empty: env.name alone",
    )
    storage: str | None = Field(
        None,
        description="null: the journal file outputs/search/journal.log; a path (no "
        "scheme): a journal file of the study's own, relative to the project (one you can "
        "commit, so any clone resumes the study); or a SQLAlchemy URL (a database)",
    )
    heartbeat_s: int = Field(
        60,
        ge=1,
        description="database storage only: how often a running trial tells the database "
        "its worker is alive",
    )
    grace_s: int = Field(
        300,
        ge=1,
        description="database storage only: a running trial silent this long belongs to a "
        "dead worker; the next worker to look fails it and queues it again",
    )
    retries: int = Field(
        2,
        ge=0,
        description="how often a trial is run again whose worker died or was stopped "
        "(Ctrl-C) before it finished",
    )
    allow_outside_repo: bool = Field(
        False, description="let a journal `storage` path resolve outside the repository"
    )
    db_outage_s: float = Field(
        300,
        ge=0,
        description="database storage only: how long the search and its workers wait for a "
        "server that stopped answering (retrying with backoff) before they stop in one line; "
        "the study stays intact and a new search resumes it",
    )

    @field_validator("storage")
    @classmethod
    def _database_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        if is_journal_path(url):
            if not url.strip() or url.endswith(("/", "\\")):
                raise ValueError(
                    f"{url!r} is not a journal file's path: name a file, e.g. "
                    "search/studies/my-study.log"
                )
            return url
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(url)
        except ArgumentError:
            raise ValueError(
                "not a database URL: use e.g. postgresql+psycopg://user:password@host:5432/"
                "optuna, a journal file's path, or null for the default journal file"
            ) from None
        return url

    @model_validator(mode="after")
    def _tasks_distinct(self) -> SearchParams:
        envs = [task.env for task in self.tasks]
        repeated = sorted({env for env in envs if envs.count(env) > 1})
        if repeated:
            raise ValueError(f"search.tasks names {', '.join(repeated)} more than once")
        return self

    @model_validator(mode="after")
    def _grace_outlasts_heartbeat(self) -> SearchParams:
        if self.grace_s <= self.heartbeat_s:
            raise ValueError(
                f"search.grace_s must exceed search.heartbeat_s ({self.heartbeat_s}), got "
                f"{self.grace_s}: a live worker's trial would be failed between beats"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _flatten_paths(cls, data: Any) -> Any:
        """`space` and `overrides` may nest their params paths (`{trainer: {num_steps: 8}}`,
        which `dvc exp run -S search.overrides.trainer.num_steps=8` can reach) or write them
        dotted (`trainer.num_steps: 8`); both mean the same, held dotted."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("space"), dict):
            data["space"] = flatten_paths(data["space"], is_leaf=lambda v: "type" in v)
        if isinstance(data.get("overrides"), dict):
            data["overrides"] = flatten_paths(data["overrides"], is_leaf=lambda v: False)
        if isinstance(data.get("enqueue"), list):
            data["enqueue"] = [
                flatten_paths(entry, is_leaf=lambda v: False) if isinstance(entry, dict) else entry
                for entry in data["enqueue"]
            ]
        return data


def _known_path(params: Params, dotted: str) -> bool:
    node: Any = params.model_dump(mode="json")
    # The chosen algorithm's settings exist even where params.yaml leaves its section out.
    algorithm = node["algorithm"]
    if algorithm.get(params.algorithm.section) is None:
        algorithm[params.algorithm.section] = asdict(params.algorithm.config)
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _other_algorithm(params: Params, dotted: str) -> str | None:
    """The registered algorithm other than the chosen one whose settings `dotted` names."""
    parts = dotted.split(".")
    if len(parts) > 2 and parts[0] == "algorithm" and parts[1] != params.algorithm.section:
        return parts[1] if parts[1] in algorithm_names() else None
    return None


def check_search_space(
    params: Params, search: SearchParams, path: Path, for_search: bool = True
) -> None:
    """Every searched or overridden path exists, and every extreme value validates.

    Entries that tune another algorithm than the chosen one fail only `for_search`, with a
    line that says so; otherwise they (and enqueued trials using them) are skipped.
    """
    entries = {f"search.overrides.{k}": (k, [v]) for k, v in search.overrides.items()}
    entries |= {f"search.space.{k}": (k, dim.extremes()) for k, dim in search.space.items()}
    foreign: dict[str, list[str]] = {}  # `search.space.algorithm.ppo` -> its keys
    for where, (dotted, _) in entries.items():
        if _other_algorithm(params, dotted):
            section, key = where.rsplit(".", 1)
            foreign.setdefault(section, []).append(key)
    chosen, errors = params.algorithm.section, []
    for section, keys in foreign.items() if for_search else ():
        other = section.rsplit(".", 1)[1]
        errors.append(
            f"{section} ({', '.join(keys)}): tunes {other}'s settings, but algorithm.name is "
            f"{params.algorithm.name}: search algorithm.{chosen}.<key> instead, or choose {other}"
        )
    for where, (dotted, values) in entries.items():
        if _other_algorithm(params, dotted):
            continue
        section = dotted.split(".")[0]
        if section not in SEARCHABLE_SECTIONS or not _known_path(params, dotted):
            errors.append(
                f"{where}: unknown parameter path (use a key of params.yaml's "
                f"{'/'.join(SEARCHABLE_SECTIONS)} sections, e.g. algorithm.ppo.lr)"
            )
            continue
        for value in values:
            try:
                apply_values(params, {**search.overrides, dotted: value})
            except ParamsError as exc:
                errors.append(f"{where}: the value {value!r} is invalid ({exc.lines[0]})")
                break
    for index, entry in enumerate(search.enqueue):
        if foreign and any(_other_algorithm(params, dotted) for dotted in entry):
            continue  # refused above, with the space entry it names
        errors += _enqueued_errors(params, search, f"search.enqueue[{index}]", entry)
    if errors:
        raise ParamsError(path, errors)


def _enqueued_errors(
    params: Params, search: SearchParams, where: str, entry: dict[str, Any]
) -> list[str]:
    """An enqueued trial's paths are searched ones, its values inside their ranges, and the
    whole trial validates."""
    errors = []
    for dotted, value in entry.items():
        dim = search.space.get(dotted)
        if dim is None:
            errors.append(f"{where}.{dotted}: not a path of search.space")
        elif not dim.contains(value):
            errors.append(f"{where}.{dotted}: {value!r} is outside the searched {dim.describe()}")
    if not errors:
        try:
            apply_values(params, {**search.overrides, **entry})
        except ParamsError as exc:
            errors.append(f"{where}: the trial is invalid ({exc.lines[0]})")
    return errors


def search_section(params: Params, path: Path = DEFAULT_PATH) -> SearchParams:
    """`params`' search section as its model (`ParamsError`, one line per problem)."""
    try:
        search = SearchParams.model_validate(params.search)
    except ValidationError as exc:
        raise ParamsError(path, describe_errors(exc, ["search"])) from None
    errors = strict_number_errors(params.search, search.model_dump(), ["search"])
    if errors:
        raise ParamsError(path, errors)
    return search


def checked_search(
    params: Params, path: Path = DEFAULT_PATH, for_search: bool = True
) -> SearchParams:
    """The search section, every searched and overridden path checked against the
    experiment (`for_search=False`: entries that tune another algorithm are left alone,
    as `python -m pipelines params` does; the search refuses them)."""
    search = search_section(params, path)
    check_search_space(params, search, path, for_search)
    return search
