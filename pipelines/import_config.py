"""`python -m pipelines import-config train_config.json`: an EmbodiChain config as params.yaml.

EmbodiChain's RL trainer reads one JSON file (`trainer`, `policy`, `algorithm: {name, cfg}`,
and the env in an `env` section or the file `trainer.gym_config` names). This maps every
setting that has an equivalent here onto `params.yaml`'s keys, converts units (EmbodiChain
counts evaluation and checkpoint intervals in env steps, we in iterations; it sizes
minibatches in samples, we count them), validates the result like any `params.yaml`, and
lists every setting it could not carry over, in the output's header and on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.files import write_text
from pipelines.params import Params, ParamsError, parse_params

ENV_IDS = {"PushCubeRL": "push_cube", "PushCube": "push_cube", "CartPoleRL": "cartpole"}
ALGORITHMS = ("ppo", "grpo", "sac")
# EmbodiChain's algorithm keys -> ours, where only the name differs.
RENAMED = {"learning_rate": "lr", "n_epochs": "num_epochs", "clip_coef": "clip_eps"}
SAME = {
    "ppo": ("gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm", "target_kl"),
    "grpo": (
        "gamma", "ent_coef", "kl_coef", "group_size", "eps", "reset_every_rollout",
        "max_grad_norm",
    ),
    "sac": ("gamma", "tau"),
}  # fmt: skip
IGNORED_TRAINER = {
    "headless": "rendering is always offscreen here",
    "enable_rt": "no ray tracing here",
    "gpu_id": "the device is env.device",
    "use_wandb": "metrics go to DVC and Prefect, not Weights & Biases",
    "wandb_project_name": "metrics go to DVC and Prefect, not Weights & Biases",
    "events": "evaluation videos come from the `video` stage",
    "distributed": "processes are runtime.processes",
}


class ConfigImportError(ValueError):
    """The file cannot be imported; the message names the key and what to do."""


@dataclass
class Conversion:
    """The params being built, with every setting that was not carried over and why."""

    params: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    def drop(self, where: str, why: str) -> None:
        self.dropped.append(f"{where}: {why}")


def _env(config: dict[str, Any], source: Path, out: Conversion) -> tuple[str, dict[str, Any]]:
    """The env id and its `cfg`, from `env` or the `trainer.gym_config` file."""
    env = config.get("env")
    where = "env"
    if env is None and "gym_config" in config.get("trainer", {}):
        path = source.parent / config["trainer"]["gym_config"]
        if not path.is_file():
            path = Path(config["trainer"]["gym_config"])
        if not path.is_file():
            raise ConfigImportError(
                f"trainer.gym_config: {config['trainer']['gym_config']} not found (looked "
                f"beside {source} and in the working directory); pass --env NAME"
            )
        env, where = json.loads(path.read_text()), "gym_config"
    if not isinstance(env, dict) or "id" not in env:
        raise ConfigImportError("env: no env section with an `id`; pass --env NAME")
    env_id = env["id"]
    if env_id not in ENV_IDS:
        raise ConfigImportError(f"{where}.id: {env_id!r} has no equivalent here; pass --env NAME")
    cfg = env.get("cfg", {})
    for key in sorted(set(cfg) - {"num_envs"}):
        out.drop(f"{where}.cfg.{key}", f"{ENV_IDS[env_id]} takes no such setting")
    return ENV_IDS[env_id], cfg


def convert(config: dict[str, Any], source: Path, env_name: str | None) -> Conversion:
    """Map an EmbodiChain config onto params.yaml's layout (not yet validated)."""
    out = Conversion()
    trainer = dict(config.get("trainer", {}))
    env_cfg: dict[str, Any] = {}
    if env_name is None:
        env_name, env_cfg = _env(config, source, out)
    num_envs = int(trainer.pop("num_envs", None) or env_cfg.get("num_envs") or 64)
    num_steps = int(trainer.pop("buffer_size", trainer.pop("rollout_steps", 64)))
    per_iter = num_envs * num_steps
    p = out.params
    p["name"] = re.sub(r"[^A-Za-z0-9_.-]", "-", str(trainer.pop("exp_name", "imported")))
    p["seeds"] = [int(trainer.pop("seed", 0))]
    p["env"] = {"name": env_name, "num_envs": num_envs, "device": trainer.pop("device", "cpu")}
    t = p["trainer"] = {"num_steps": num_steps}
    t["total_env_steps"] = int(trainer.pop("iterations", 250)) * per_iter
    eval_freq = trainer.pop("eval_freq", None)
    enabled = trainer.pop("enable_eval", True)
    if enabled and eval_freq is not None:
        t["eval_every_iters"] = max(round(eval_freq / per_iter), 1)
    elif not enabled:
        t["eval_every_iters"] = 0  # only the final evaluation
    save_freq = trainer.pop("save_freq", None)
    if save_freq is not None:
        t["checkpoint_every_iters"] = max(round(save_freq / per_iter), 1)
    episodes = int(trainer.pop("num_eval_envs", 1)) * int(trainer.pop("num_eval_episodes", 16))
    t["eval_episodes"] = episodes
    trainer.pop("gym_config", None)
    for key in sorted(trainer):
        why = IGNORED_TRAINER.get(key, "no equivalent setting")
        out.drop(f"trainer.{key}", why)
    _policy(config.get("policy", {}), out)
    _algorithm(config.get("algorithm", {}), per_iter, out)
    return out


def _policy(policy: dict[str, Any], out: Conversion) -> None:
    actor = policy.get("actor", {}).get("network_cfg", {})
    critic = policy.get("critic", {}).get("network_cfg", {})
    p = out.params["policy"] = {}
    if "hidden_sizes" in actor:
        p["hidden_sizes"] = list(actor["hidden_sizes"])
    if "activation" in actor:
        p["activation"] = actor["activation"]
    if critic and critic != actor:
        out.drop("policy.critic.network_cfg", "actor and critic share one size here (the actor's)")
    for key in sorted(set(policy) - {"name", "actor", "critic"}):
        out.drop(f"policy.{key}", "no equivalent setting")


def _algorithm(algorithm: dict[str, Any], per_iter: int, out: Conversion) -> None:
    name = algorithm.get("name")
    if name not in ALGORITHMS:
        raise ConfigImportError(
            f"algorithm.name: {name!r} has no equivalent; ours are {ALGORITHMS}"
        )
    cfg, section = dict(algorithm.get("cfg", {})), {}
    for theirs, ours in RENAMED.items():
        if theirs in cfg:
            section[ours] = cfg.pop(theirs)
    for key in SAME[name]:
        if key in cfg:
            section[key] = cfg.pop(key)
    if name == "sac":
        out.params["replay"] = {
            ours: cfg.pop(theirs)
            for theirs, ours in (("batch_size", "batch_size"), ("buffer_size", "capacity"))
            if theirs in cfg
        }
        section.pop("num_epochs", None)
    elif "batch_size" in cfg:  # samples per minibatch there; minibatches per epoch here
        section["num_minibatches"] = max(round(per_iter / cfg.pop("batch_size")), 1)
    if name == "grpo" and cfg.pop("truncate_at_first_done", False):
        section["episode_mode"] = "first_done"
    for key in sorted(cfg):
        out.drop(f"algorithm.cfg.{key}", "no equivalent setting")
    out.params["algorithm"] = {"name": name, name: section}


def render(conversion: Conversion, params: Params, source: Path) -> str:
    """The whole params.yaml (every section, as DVC's stages track them all): a header
    naming the source and what was not imported, then the validated settings."""
    data = params.model_dump(mode="json")
    del data["trainer"]["seed"]  # the seeds are the top-level `seeds`
    algorithm = data["algorithm"]
    data["algorithm"] = {
        "name": algorithm["name"],
        params.algorithm.section: algorithm[params.algorithm.section] or {},
    }
    lines = [
        f"# Imported from {source.name} by `python -m pipelines import-config`;",
        "# every other setting is this platform's default.",
    ]
    if conversion.dropped:
        lines.append("# Not imported (no equivalent here):")
        lines += [f"#   {item}" for item in conversion.dropped]
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False)


def import_config_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines import-config")
    parser.add_argument("config", type=Path, help="EmbodiChain train_config.json")
    parser.add_argument("-o", "--output", type=Path, default=Path("params.yaml"))
    parser.add_argument("--env", help="our env name, when the config's env cannot be read")
    parser.add_argument("--force", action="store_true", help="overwrite the output file")
    args = parser.parse_args(argv)
    try:
        config = json.loads(args.config.read_text())
    except OSError as exc:
        return _fail(args.config, f"cannot be read ({exc.strerror or exc})")
    except json.JSONDecodeError as exc:
        return _fail(args.config, f"line {exc.lineno}: malformed JSON ({exc.msg})")
    if not isinstance(config, dict):
        return _fail(args.config, "<top level>: must be a JSON object")
    try:
        conversion = convert(config, args.config, args.env)
    except ConfigImportError as exc:
        return _fail(args.config, str(exc))
    try:
        params = parse_params(conversion.params, args.output)
    except ParamsError as exc:
        return _fail(args.config, f"the imported settings are invalid here: {exc.lines[0]}")
    if args.output.exists() and not args.force:
        return _fail(args.output, "exists; pass --force to overwrite it")
    write_text(args.output, render(conversion, params, args.config))
    print(f"wrote {args.output} ({conversion.params['algorithm']['name']} on "
          f"{conversion.params['env']['name']})")  # fmt: skip
    for item in conversion.dropped:
        print(f"not imported: {item}")
    return 0


def _fail(path: Path, message: str) -> int:
    print(f"error: {path}: {message}", file=sys.stderr)
    return 2
