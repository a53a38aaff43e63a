"""Mapping an EmbodiChain config onto params.yaml: each key imported (with its conversion)
or listed as not imported (with why), and the result validated as params.yaml is.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pipelines.import_config.read import (
    ConfigImportError,
    Imported,
    _json_file,
    _printable,
    _show,
    _typed,
)
from pipelines.import_config.tables import (
    _EXPAND,
    _SCENE,
    ENV_IDS,
    POLICIES,
    RENAMES,
    THEIR_DEFAULTS,
    WHY,
)
from pipelines.params import ParamsError, parse_params
from rlcore.config import ACTIVATION_NAMES, ENV_NAMES, EnvConfig, TrainerConfig


def _leftovers(node: dict[str, Any], used: set[str], prefix: str = "") -> list[str]:
    """The paths under `node` that no mapping read (an empty mapping or list sets nothing)."""
    paths = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if path in used or value in ({}, []):
            continue
        inner = any(u.startswith(path + ".") for u in used)
        if isinstance(value, dict) and (inner or path in _EXPAND):
            paths += _leftovers(value, used, path + ".")
        else:
            paths.append(path)
    return paths


def every_iters(freq: int, steps_per_iter: int) -> int:
    """How many iterations apart EmbodiChain's trainer acts on `global_step % freq == 0`.

    Its step counter grows by `steps_per_iter` per iteration, so the test passes every
    `freq / gcd(freq, steps_per_iter)` iterations; `freq <= 0` is off (0).
    """
    return freq // math.gcd(freq, steps_per_iter) if freq > 0 else 0


class _Importer:
    def __init__(self, config: dict[str, Any], source: Path) -> None:
        self.config, self.source = config, source
        self.data: dict[str, Any] = {}
        self.used: set[str] = set()
        self.imported: list[str] = []
        self.dropped: list[str] = []
        self.origins: dict[str, str] = {}  # our dotted key -> the JSON key it came from

    def section(self, name: str) -> dict[str, Any]:
        return self.config.get(name, {})

    def get(self, path: str, default: Any = None) -> Any:
        """The value at `path`, marked as read; `default` if absent."""
        node: Any = self.config
        for key in path.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        self.used.add(path)
        return node

    def count(self, path: str, default: int, minimum: int = 1) -> int:
        value = self.get(path, default)
        if type(value) is not int or value < minimum:
            raise ConfigImportError([f"{path}: must be an integer >= {minimum}, got {value!r}"])
        return value

    def put(self, ours: str, value: Any, origin: str, how: str = "") -> None:
        *parents, leaf = ours.split(".")
        node = self.data
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        self.origins[ours] = origin
        self.imported.append(f"{ours}: {_show(value)} <- {origin}" + (f" ({how})" if how else ""))

    def drop(self, path: str, why: str) -> None:
        """List `path` as not imported, by name: its value stays out of the output."""
        self.used.add(path)
        self.dropped.append(f"{path}: {why}")

    def run(self, env_override: str | None) -> None:
        for name in ("trainer", "env", "policy", "algorithm"):
            if not isinstance(self.section(name), dict):
                raise ConfigImportError([f"{name}: must be a JSON object"])
        name = self.get("algorithm.name")
        if not isinstance(name, str) or name.lower() not in RENAMES:
            raise ConfigImportError(
                [f"algorithm.name: {name!r} has no equivalent here; use one of {sorted(RENAMES)}"]
            )
        algo = name.lower()
        self._identity()
        num_envs = self._env(env_override)
        num_steps = self._trainer(num_envs)
        self._policy(algo)
        self._algorithm(algo, num_envs * num_steps)
        for path in _leftovers(self.config, self.used):
            self.drop(path, WHY.get(path, WHY.get(path.rpartition(".")[2], "no equivalent here")))

    def _identity(self) -> None:
        name = self.get("trainer.exp_name")
        if name is not None:
            _typed("trainer.exp_name", name, "")
            clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "experiment"
            how = "" if clean == name else "sanitised to letters, digits and _.-"
            self.put("name", clean, "trainer.exp_name", how)
        seed = self.get("trainer.seed")
        if seed is not None:
            self.put("seeds", [_typed("trainer.seed", seed, 0)], "trainer.seed", "one run per seed")
        device = self.get("trainer.device")
        if device is not None:
            device = _typed("trainer.device", device, "")
            self.put("env.device", device, "trainer.device", "envs and networks share it")

    def _env(self, override: str | None) -> int:
        """Set env.name and env.num_envs; return the number of envs."""
        gym_ref = self.get("trainer.gym_config")
        gym = None if gym_ref is None else self._gym_config(gym_ref)
        env_id, key = self.get("env.id"), "env.id"
        if env_id is None and gym is not None and "id" in gym:
            env_id, key = gym["id"], "trainer.gym_config"
        if override is not None:
            if env_id is not None:
                self.dropped.append(f"{key}: replaced by --env")
            env_id, key = override, "--env"
        if env_id is None:
            raise ConfigImportError([
                'env.id: missing; add "env": {"id": "PushCubeRL"}, point trainer.gym_config '
                "at EmbodiChain's gym_config.json, or pass --env PushCubeRL"
            ])  # fmt: skip
        if not isinstance(env_id, str):
            raise ConfigImportError([f"{key}: must be an env id string, got {env_id!r}"])
        ours = ENV_IDS.get(env_id) or (env_id if key == "--env" and env_id in ENV_NAMES else None)
        if ours is None:
            raise ConfigImportError([
                f"{key}: env id {env_id!r} has no equivalent here; known: {sorted(ENV_IDS)}, "
                f"or pass --env with one of ours {sorted(ENV_NAMES)}"
            ])  # fmt: skip
        self.put("env.name", ours, key if key == "env.id" else f"{key} id {env_id!r}")
        # EmbodiChain's trainer.num_envs overrides the env's own count.
        gym_env = gym.get("env") if gym is not None and isinstance(gym.get("env"), dict) else {}
        given = [(p, self.get(p)) for p in ("trainer.num_envs", "env.cfg.num_envs")]
        given = [(p, v) for p, v in given if v is not None]
        if "num_envs" in gym_env:
            given.append((f"{gym_ref}: env.num_envs", gym_env["num_envs"]))
        for origin, _ in given[1:]:
            self.dropped.append(f"{origin}: overridden by {given[0][0]}")
        num_envs = EnvConfig().num_envs
        if given:
            origin, num_envs = given[0]
            if type(num_envs) is not int or num_envs < 1:
                raise ConfigImportError([f"{origin}: must be an integer >= 1, got {num_envs!r}"])
            self.put("env.num_envs", num_envs, origin)
        unread = _leftovers(gym, {"id", "env.num_envs"} if gym_env else {"id"}) if gym else []
        if unread:  # a colleague's file: nothing of it but what maps reaches the output
            self.dropped.append(f"{gym_ref}: its {len(unread)} other keys, not read: {_SCENE}")
        return num_envs

    def _gym_config(self, ref: Any) -> dict[str, Any] | None:
        """EmbodiChain's gym_config, only from within the config's own directory tree (its
        path is relative to EmbodiChain's checkout, which holds the config)."""
        if "\0" in _typed("trainer.gym_config", ref, ""):
            raise ConfigImportError([f"trainer.gym_config: {ref!r} is not a path"])
        tree = self.source.resolve().parent
        given = Path(ref)
        escapes = given.is_absolute() or ".." in given.parts
        roots = [tree] if escapes else [tree, *tree.parents]
        path = next((root / given for root in roots if (root / given).is_file()), tree / given)
        if not path.resolve().is_relative_to(tree):
            raise ConfigImportError([
                f"trainer.gym_config: {ref!r} is outside {tree}, the config's directory "
                "(symlinks resolved); copy the gym config beside the config, or pass --env"
            ])  # fmt: skip
        if not path.is_file():
            self.drop("trainer.gym_config", "not found beside the file or below it; no env read")
            return None
        try:
            data = _json_file(path)
        except ConfigImportError as exc:
            raise ConfigImportError([f"trainer.gym_config: {ref}: {exc.lines[0]}"]) from None
        if not isinstance(data, dict):
            raise ConfigImportError([f"trainer.gym_config: {ref}: must hold a JSON object"])
        return data

    def _trainer(self, num_envs: int) -> int:
        """Set the trainer section; return the rollout length."""
        trainer = self.section("trainer")
        keys = [f"trainer.{k}" for k in ("buffer_size", "rollout_steps") if k in trainer]
        num_steps = TrainerConfig().num_steps
        if keys:
            num_steps = self.count(keys[0], 0)
            self.put("trainer.num_steps", num_steps, keys[0], "steps per env per rollout")
        for key in keys[1:]:
            self.drop(key, f"{keys[0]} was imported")
        step = num_envs * num_steps
        if "iterations" in trainer:
            iters = self.count("trainer.iterations", 0)
            how = f"iterations x steps x envs: {iters} x {num_steps} x {num_envs}"
            self.put("trainer.total_env_steps", iters * step, "trainer.iterations", how)
        enabled = self.get("trainer.enable_eval", True)
        if type(enabled) is not bool:
            raise ConfigImportError(
                [f"trainer.enable_eval: must be true or false, got {enabled!r}"]
            )
        if not enabled:
            how = "ours still evaluates once, at the end"
            self.put("trainer.eval_every_iters", 0, "trainer.enable_eval", how)
            for key in ("eval_freq", "num_eval_envs", "num_eval_episodes"):
                if key in trainer:
                    self.drop(f"trainer.{key}", "evaluation is off (trainer.enable_eval)")
        else:
            if "enable_eval" in trainer:
                self.imported.append("(trainer.enable_eval: true; evaluation is on here too)")
            self._every("eval_freq", "eval_every_iters", step)
            if {"num_eval_envs", "num_eval_episodes"} & set(trainer):
                envs = self.count("trainer.num_eval_envs", 4)  # EmbodiChain's defaults: 4, 5
                rounds = self.count("trainer.num_eval_episodes", 5)
                origin = "trainer.num_eval_envs x trainer.num_eval_episodes"
                how = f"{rounds} rounds of {envs} eval envs there"
                self.put("trainer.eval_episodes", envs * rounds, origin, how)
        self._every("save_freq", "checkpoint_every_iters", step)
        return num_steps

    def _every(self, theirs: str, ours: str, step: int) -> None:
        if theirs not in self.section("trainer"):
            return
        freq = self.count(f"trainer.{theirs}", 0, minimum=0)
        iters = every_iters(freq, step)
        how = (
            f"{freq} env steps there, tested as global_step % {theirs} == 0 after each "
            f"iteration of {step} env steps: true every {iters} iteration(s)"
        )
        self.put(f"trainer.{ours}", iters, f"trainer.{theirs}", how if freq > 0 else "off")

    def _mlp(self, role: str) -> tuple[Any, Any] | None:
        """(hidden sizes, activation) of `policy.<role>` if it is an MLP; marks nothing."""
        entry = self.section("policy").get(role)
        if not isinstance(entry, dict) or entry.get("type", "mlp") != "mlp":
            return None
        cfg = entry.get("network_cfg")
        return (cfg.get("hidden_sizes"), cfg.get("activation")) if isinstance(cfg, dict) else None

    def _policy(self, algo: str) -> None:
        name = self.get("policy.name")
        if name == "vla":
            raise ConfigImportError([
                "policy.name: 'vla' (a vision-language-action model) is not supported: policies "
                "here are MLPs over named observation entries, with CNN encoders for camera "
                "images (policy.encoders); import it with actor_critic or actor_only"
            ])  # fmt: skip
        if name == POLICIES[algo]:
            self.imported.append(f"(policy.name: {name}, as {algo}'s policy is here too)")
        elif name is not None:
            self.drop("policy.name", f"{algo} trains an MLP {POLICIES[algo]} here")
        actor = self._mlp("actor")
        if actor is None and "actor" in self.section("policy"):
            self.drop("policy.actor", "not an MLP network_cfg; ours is an MLP (policy section)")
        elif actor is not None:
            for key in ("type", "network_cfg.hidden_sizes", "network_cfg.activation"):
                self.get(f"policy.actor.{key}")
            sizes, activation = actor
            if sizes is not None:
                where = "policy.actor.network_cfg.hidden_sizes"
                if not isinstance(sizes, list):
                    raise ConfigImportError([f"{where}: must be a list of integers"])
                self.put("policy.hidden_sizes", [_typed(where, n, 0) for n in sizes], where)
            where = "policy.actor.network_cfg.activation"
            if isinstance(activation, str) and activation.lower() in ACTIVATION_NAMES:
                self.put("policy.activation", activation.lower(), where)
            elif activation is not None:
                self.drop(where, f"ours are {sorted(ACTIVATION_NAMES)}; the default is kept")
        if "critic" not in self.section("policy"):
            return
        if algo == "grpo":
            self.drop("policy.critic", "GRPO trains no critic")
        elif actor is not None and self._mlp("critic") == actor:
            for key in ("type", "network_cfg.hidden_sizes", "network_cfg.activation"):
                self.get(f"policy.critic.{key}")
            self.imported.append("(policy.critic: the actor's MLP; actor and critic share it)")
        else:
            self.drop("policy.critic", "actor and critic share one MLP shape here (the actor's)")

    def _algorithm(self, algo: str, samples: int) -> None:
        cfg = self.section("algorithm").get("cfg", {})  # its keys are marked one by one
        if not isinstance(cfg, dict):
            raise ConfigImportError(["algorithm.cfg: must be a JSON object"])
        self.put("algorithm.name", algo, "algorithm.name")
        defaults = THEIR_DEFAULTS[algo]

        def theirs(key: str) -> tuple[Any, str, str]:
            """The value, where it came from, and a note if it is EmbodiChain's default."""
            if key in cfg:
                where = f"algorithm.cfg.{key}"
                return _typed(where, self.get(where), defaults[key]), where, ""
            return defaults[key], f"EmbodiChain's {key}", "absent: EmbodiChain's default"

        for key, ours in RENAMES[algo].items():
            self.put(f"algorithm.{algo}.{ours}", *theirs(key))
        batch = self.count("algorithm.cfg.batch_size", defaults["batch_size"])
        how = f"{samples} samples per update / batch_size {batch}"
        how += "" if samples % batch == 0 else ", rounded"
        origin = theirs("batch_size")[1]
        self.put(f"algorithm.{algo}.num_minibatches", max(1, round(samples / batch)), origin, how)
        if algo == "ppo":
            value, origin, note = theirs("vf_coef")
            how = "x 2: EmbodiChain's value loss is the MSE, ours 0.5 x MSE"
            self.put("algorithm.ppo.vf_coef", value * 2, origin, f"{how}; {note}" if note else how)
        else:
            if "gae_lambda" in cfg:
                self.drop("algorithm.cfg.gae_lambda", "GRPO has no critic, hence no GAE")
            value, origin, note = theirs("truncate_at_first_done")
            if value is True:
                self.put("algorithm.grpo.episode_mode", "first_done", origin, note)
            else:
                self.dropped.append(
                    f"{origin} = false: counting every episode of a rollout has no "
                    "equivalent; episode_mode keeps restart_groups"
                )
        self.put(f"algorithm.{algo}.adam_eps", 1e-8, "EmbodiChain's Adam", "torch's default eps")


def _explain(line: str, origins: dict[str, str]) -> str:
    """A params validation line, located at the JSON key it came from."""
    loc, _, message = line.partition(": ")
    parts = loc.split(".")
    for n in range(len(parts), 0, -1):
        origin = origins.get(".".join(parts[:n]))
        if origin is not None:
            return f"{origin}: {message} (imported as {loc})"
    return line


def import_config(path: Path, env: str | None = None) -> Imported:
    """Read an EmbodiChain training config and map it onto a validated params.yaml mapping.

    Args:
        env: an EmbodiChain env id or one of our env names, in place of the file's.
    """
    config = _json_file(path)
    if not isinstance(config, dict):
        raise ConfigImportError(["<top level>: must be a JSON object"])
    importer = _Importer(config, path)
    importer.run(env)
    try:
        params = parse_params(importer.data)
    except ParamsError as exc:
        raise ConfigImportError([_explain(line, importer.origins) for line in exc.lines]) from None
    data = params.model_dump(mode="json")
    data["trainer"].pop("seed", None)  # the seeds are the top-level `seeds`
    section = params.algorithm.section
    data["algorithm"] = {"name": params.algorithm.name, section: data["algorithm"][section]}
    listed = [_printable(line) for line in importer.imported]
    return Imported(data, listed, [_printable(line) for line in importer.dropped])
