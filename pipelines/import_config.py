"""`python -m pipelines import-config`: an EmbodiChain training config (JSON) as a params.yaml.

EmbodiChain configures a run as `{trainer, env, policy, algorithm: {name, cfg}}`, its env id
either in an `env` section or in the file that `trainer.gym_config` names. Every key of the
file ends up in one of two lists, both printed and written as the header of the output:
imported (with the conversion, where there is one) or not imported (with why). Keys of the
algorithm the file leaves out take EmbodiChain's defaults, as they did there; every other
value of the output is this project's default. The result is validated by
`pipelines.params.parse_params` before it is written.

Exit codes: 0 written, 2 a bad input (one `error: <file>: <key>: <what to do>` line each).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from pipelines.params import ParamsError, parse_params
from rlcore.config import ACTIVATION_NAMES, ENV_NAMES, EnvConfig, TrainerConfig

ENV_IDS = {"PushCubeRL": "push_cube"}  # EmbodiChain env id -> our builtin env

# EmbodiChain's PPOCfg and GRPOCfg: the values of the keys a file leaves out.
THEIR_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": {"learning_rate": 3e-4, "n_epochs": 10, "batch_size": 64, "gamma": 0.99,
            "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.01, "vf_coef": 0.5,
            "max_grad_norm": 0.5},
    "grpo": {"learning_rate": 3e-4, "n_epochs": 10, "batch_size": 64, "gamma": 0.99,
             "clip_coef": 0.2, "ent_coef": 0.0, "kl_coef": 0.02, "group_size": 4, "eps": 1e-8,
             "reset_every_rollout": True, "max_grad_norm": 0.5, "truncate_at_first_done": True},
}  # fmt: skip
_SAME = ("gamma", "ent_coef", "max_grad_norm")
RENAMES: dict[str, dict[str, str]] = {  # theirs -> ours, same meaning and units
    "ppo": {"learning_rate": "lr", "n_epochs": "num_epochs", "clip_coef": "clip_eps",
            "gae_lambda": "gae_lambda", **{key: key for key in _SAME}},
    "grpo": {"learning_rate": "lr", "n_epochs": "num_epochs", "clip_coef": "clip_eps",
             **{key: key for key in (*_SAME, "kl_coef", "group_size", "eps",
                                     "reset_every_rollout")}},
}  # fmt: skip
POLICIES = {"ppo": "actor_critic", "grpo": "actor_only"}

_SCENE = (
    "EmbodiChain's simulated scene (robot, objects, events, rewards); push_cube is a builtin "
    "planar task with fixed dynamics and reward"
)
_WANDB = "Weights & Biases logging; metrics go to metrics/ (DVC) and the report"
WHY: dict[str, str] = {
    "trainer.headless": "the simulator's viewer window; builtin envs have none",
    "trainer.enable_rt": "the simulator's ray-traced rendering; no equivalent",
    "trainer.gpu_id": "the simulator's GPU; here the one device is env.device",
    "trainer.use_wandb": _WANDB,
    "trainer.wandb_project_name": _WANDB,
    "trainer.events": "EmbodiChain event functors (e.g. a camera recording evaluation); "
    "the `video` stage records evaluation episodes (params `video`)",
    "policy.action_dim": "the action size comes from the env's action space here",
    "algorithm.cfg.device": "the device is env.device (from trainer.device)",
    "env.cfg.actions": "action-manager terms of the simulated robot; push_cube's action is "
    "a 2-D pusher velocity in [-1, 1]",
    "env.cfg.extensions": "task parameters of EmbodiChain's PushCubeRL; push_cube's are "
    "fixed (success within 5 cm of the goal, 100-step episodes)",
}


class ConfigImportError(ValueError):
    """The file cannot be imported; each of `lines` is `key: what to do`."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else ("{...}" if isinstance(value, dict) else "[...]")


def _leftovers(node: dict[str, Any], used: set[str], prefix: str = "") -> list[str]:
    """The paths under `node` that no mapping read (empty mappings and lists set nothing)."""
    paths = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if path in used or value in ({}, []):
            continue
        if isinstance(value, dict) and any(u.startswith(path + ".") for u in used):
            paths += _leftovers(value, used, path + ".")
        else:
            paths.append(path)
    return paths


def _every_iters(freq: int, steps_per_iter: int) -> int:
    """EmbodiChain acts after an iteration when `global_step % freq == 0`: how often that is."""
    return freq // math.gcd(freq, steps_per_iter) if freq > 0 else 0


class _Importer:
    def __init__(self, config: dict[str, Any], source: Path) -> None:
        self.config, self.source = config, source
        self.data: dict[str, Any] = {}
        self.used: set[str] = set()
        self.imported: list[str] = []
        self.dropped: list[str] = []
        self.origins: dict[str, str] = {}  # our dotted key -> the JSON key it came from

    def get(self, path: str, default: Any = None) -> Any:
        """The value at `path` (marked as read), or `default` if absent."""
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
        if not origin.startswith(("EmbodiChain", "--")):
            self.origins[ours] = origin
        self.imported.append(f"{ours}: {_show(value)} <- {origin}" + (f" ({how})" if how else ""))

    def drop(self, path: str, why: str, label: str = "") -> None:
        self.used.add(path)
        value = self.get(path)
        self.dropped.append(f"{label or path} = {_show(value)}: {why}")

    def run(self, env_override: str | None) -> None:
        for section in ("trainer", "env", "policy", "algorithm"):
            if not isinstance(self.config.get(section, {}), dict):
                raise ConfigImportError([f"{section}: must be a JSON object"])
        algo = self._algorithm_name()
        self._identity()
        num_envs = self._env(env_override)
        num_steps = self._trainer(num_envs)
        self._policy(algo)
        self._algorithm(algo, num_envs * num_steps)
        for path in _leftovers(self.config, self.used):
            self.drop(path, WHY.get(path, "no equivalent here"))

    def _algorithm_name(self) -> str:
        name = self.get("algorithm.name")
        if not isinstance(name, str) or name.lower() not in RENAMES:
            raise ConfigImportError(
                [f"algorithm.name: {name!r} has no equivalent here; use one of {sorted(RENAMES)}"]
            )
        return name.lower()

    def _identity(self) -> None:
        name = self.get("trainer.exp_name")
        if name is not None:
            clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(name)).strip("-") or "experiment"
            how = "" if clean == name else f"sanitised from {name!r} to [A-Za-z0-9_.-]"
            self.put("name", clean, "trainer.exp_name", how)
        seed = self.get("trainer.seed")
        if seed is not None:
            self.put("seeds", [seed], "trainer.seed", "one run per seed")
        device = self.get("trainer.device")
        if device is not None:
            self.put("env.device", device, "trainer.device", "one device for env and networks")

    def _env(self, override: str | None) -> int:
        """Set env.name and env.num_envs; return the number of envs."""
        env_id, origin = self.get("env.id"), "env.id"
        gym_ref = self.get("trainer.gym_config")
        gym = self._gym_config(gym_ref) if gym_ref is not None else None
        if env_id is None and gym is not None:
            env_id, origin = gym[1].get("id"), f"id in {gym_ref}"
        if override is not None:
            env_id, origin = override, "--env"
        if env_id is None:
            raise ConfigImportError([
                "env.id: no env id; add \"env\": {\"id\": \"PushCubeRL\"}, set "
                "trainer.gym_config to EmbodiChain's gym_config.json, or pass --env PushCubeRL"
            ])  # fmt: skip
        ours = ENV_IDS.get(env_id, env_id if env_id in ENV_NAMES and origin == "--env" else None)
        if ours is None:
            key = "--env" if origin == "--env" else "env.id" if origin == "env.id" else "trainer.gym_config"
            raise ConfigImportError([
                f"{key}: env id {env_id!r} has no equivalent here; known: {sorted(ENV_IDS)} "
                f"(or pass --env with one of ours: {sorted(ENV_NAMES)})"
            ])  # fmt: skip
        self.put("env.name", ours, f"{origin} {env_id!r}" if origin != "env.id" else "env.id")
        num_envs = self.get("trainer.num_envs")
        for path in ("env.cfg.num_envs",):
            if self.get(path) is not None and num_envs is not None:
                self.drop(path, "overridden by trainer.num_envs, as in EmbodiChain")
        candidates = [("trainer.num_envs", num_envs), ("env.cfg.num_envs", self.get("env.cfg.num_envs"))]
        if gym is not None:
            candidates.append((f"env.num_envs in {gym_ref}", gym[1].get("env", {}).get("num_envs")))
        origin, value = next(((o, v) for o, v in candidates if v is not None), ("", None))
        if value is None:
            value = EnvConfig().num_envs
        elif type(value) is not int or value < 1:
            raise ConfigImportError([f"{origin}: must be an integer >= 1, got {value!r}"])
        else:
            self.put("env.num_envs", value, origin)
        if gym is not None:
            self._gym_leftovers(gym_ref, gym[1], origin.endswith(gym_ref))
        return value

    def _gym_config(self, ref: Any) -> tuple[Path, dict[str, Any]] | None:
        """EmbodiChain's gym_config file (paths there are relative to its checkout's root)."""
        ref_path = Path(str(ref))
        roots = [Path.cwd(), *self.source.resolve().parents]
        found = [root / ref_path for root in roots] + [self.source.parent / ref_path.name]
        path = next((p for p in found if p.is_file()), None)
        if path is None:
            self.drop("trainer.gym_config", "not found (looked from here and above the file)")
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigImportError([f"trainer.gym_config: {path} cannot be read ({exc})"]) from None
        if not isinstance(data, dict):
            raise ConfigImportError([f"trainer.gym_config: {path} must hold a JSON object"])
        return path, data

    def _gym_leftovers(self, ref: str, gym: dict[str, Any], used_num_envs: bool) -> None:
        used = {"id"} | ({"env.num_envs"} if used_num_envs else set())
        for path in _leftovers(gym, used):
            node: Any = gym
            for key in path.split("."):
                node = node[key]
            why = "overridden by trainer.num_envs" if path == "env.num_envs" else _SCENE
            self.dropped.append(f"{ref}: {path} = {_show(node)}: {why}")

    def _trainer(self, num_envs: int) -> int:
        """Set the trainer section; return the rollout length."""
        key = "trainer.buffer_size" if "buffer_size" in self.config.get("trainer", {}) else None
        key = key or "trainer.rollout_steps"
        num_steps = self.count(key, TrainerConfig().num_steps)
        if key in self.used:
            self.put("trainer.num_steps", num_steps, key, "steps per env per rollout")
        step = num_envs * num_steps
        if "iterations" in self.config.get("trainer", {}):
            iters = self.count("trainer.iterations", 1)
            how = f"iterations x steps x num_envs = {iters} x {num_steps} x {num_envs}"
            self.put("trainer.total_env_steps", iters * step, "trainer.iterations", how)
        if self.get("trainer.enable_eval", True) is False:
            self.put("trainer.eval_every_iters", 0, "trainer.enable_eval", "ours still "
                     "evaluates once, at the end")  # fmt: skip
            for path in ("trainer.eval_freq", "trainer.num_eval_envs", "trainer.num_eval_episodes"):
                if self.get(path) is not None:
                    self.drop(path, "evaluation is off (trainer.enable_eval: false)")
        else:
            self._every("eval_freq", "eval_every_iters", step)
            envs, episodes = self.get("trainer.num_eval_envs"), self.get("trainer.num_eval_episodes")
            if envs is not None or episodes is not None:
                envs = self.count("trainer.num_eval_envs", 4)  # EmbodiChain's defaults: 4 x 5
                episodes = self.count("trainer.num_eval_episodes", 5)
                how = f"{episodes} rounds of {envs} eval envs = num_eval_episodes x num_eval_envs"
                self.put("trainer.eval_episodes", envs * episodes, "trainer.num_eval_*", how)
        self._every("save_freq", "checkpoint_every_iters", step)
        return num_steps

    def _every(self, theirs: str, ours: str, step: int) -> None:
        if f"{theirs}" not in self.config.get("trainer", {}):
            return
        freq = self.count(f"trainer.{theirs}", 1, minimum=0)
        iters = _every_iters(freq, step)
        how = (
            f"{freq} env steps; EmbodiChain acts after an iteration when global_step % "
            f"{theirs} == 0 and an iteration is {step} env steps: every {iters} iterations"
        )
        self.put(f"trainer.{ours}", iters, f"trainer.{theirs}", how if freq else "0: off")

    def _policy(self, algo: str) -> None:
        name = self.get("policy.name")
        if name is not None and name != POLICIES[algo]:
            self.drop("policy.name", f"{algo} trains an MLP {POLICIES[algo]} here")
        actor = self._network("policy.actor")
        if actor is not None:
            sizes, activation = actor
            self.put("policy.hidden_sizes", sizes, "policy.actor.network_cfg.hidden_sizes")
            if activation is not None:
                self.put("policy.activation", activation, "policy.actor.network_cfg.activation")
        if "critic" not in self.config.get("policy", {}):
            return
        if algo == "grpo":
            self.drop("policy.critic", "GRPO trains no critic")
        elif self._network("policy.critic", mark=False) == actor:
            self._network("policy.critic")
            self.imported.append("(policy.critic: the same network as the actor's, shared here)")
        else:
            self.drop("policy.critic", "actor and critic share policy.hidden_sizes and "
                      "policy.activation here; the actor's were imported")  # fmt: skip

    def _network(self, path: str, mark: bool = True) -> tuple[Any, str | None] | None:
        """(hidden sizes, activation) of an MLP network entry, or None if there is none."""
        entry = self.config.get("policy", {}).get(path.rpartition(".")[2])
        cfg = entry.get("network_cfg") if isinstance(entry, dict) else None
        if not isinstance(cfg, dict) or entry.get("type", "mlp") != "mlp":
            return None
        sizes, activation = cfg.get("hidden_sizes"), cfg.get("activation")
        if mark:
            self.get(f"{path}.type")
            if sizes is not None:
                self.get(f"{path}.network_cfg.hidden_sizes")
            if isinstance(activation, str) and activation.lower() in ACTIVATION_NAMES:
                self.get(f"{path}.network_cfg.activation")
            elif activation is not None:
                self.drop(f"{path}.network_cfg.activation", f"ours are {sorted(ACTIVATION_NAMES)}")
        if activation is not None:
            ok = isinstance(activation, str) and activation.lower() in ACTIVATION_NAMES
            activation = activation.lower() if ok else None
        return (sizes, activation) if sizes is not None else None

    def _algorithm(self, algo: str, samples: int) -> None:
        cfg = self.get("algorithm.cfg", {})
        if not isinstance(cfg, dict):
            raise ConfigImportError(["algorithm.cfg: must be a JSON object"])
        self.put("algorithm.name", algo, "algorithm.name")
        defaults = THEIR_DEFAULTS[algo]

        def theirs(key: str) -> tuple[Any, str, str]:
            if key in cfg:
                return self.get(f"algorithm.cfg.{key}"), f"algorithm.cfg.{key}", ""
            return defaults[key], f"EmbodiChain's default {key}", "absent from the file"

        for key, ours in RENAMES[algo].items():
            self.put(f"algorithm.{algo}.{ours}", *theirs(key))
        batch = self.count("algorithm.cfg.batch_size", defaults["batch_size"])
        minibatches = max(1, round(samples / batch))
        how = f"{samples} samples per update / batch_size {batch}"
        origin = "algorithm.cfg.batch_size" if "batch_size" in cfg else "EmbodiChain's default"
        self.put(f"algorithm.{algo}.num_minibatches", minibatches, origin,
                 how + ("" if samples % batch == 0 else ", rounded"))  # fmt: skip
        if algo == "ppo":
            value, origin, how = theirs("vf_coef")
            if isinstance(value, int | float):
                value *= 2
            how = "x 2: EmbodiChain's value loss is the MSE, ours is 0.5 x MSE" + (
                f"; {how}" if how else "")  # fmt: skip
            self.put("algorithm.ppo.vf_coef", value, origin, how)
            if "gae_lambda" not in cfg:
                pass
        else:
            if "gae_lambda" in cfg:
                self.drop("algorithm.cfg.gae_lambda", "GRPO has no critic, so no GAE")
            value, origin, how = theirs("truncate_at_first_done")
            if value is True:
                self.put("algorithm.grpo.episode_mode", "first_done", origin, how)
            else:
                self.used.add(origin)
                self.dropped.append(
                    f"{origin} = {_show(value)}: counting every episode of a rollout, "
                    "unsynchronised within groups, has no equivalent; ours is restart_groups"
                )
        self.put(f"algorithm.{algo}.adam_eps", 1e-8, "EmbodiChain's Adam (torch's default eps)")
