"""The `collect` stage: an offline dataset of transitions for `replay.offline`.

Rolls out the first seed's trained policy (its sampled actions) or uniform random actions
for `collect.env_steps` env steps and writes the dataset directory `collect.output` (the
format of `rlcore.datasets`: one raw file per key plus `meta.json`), replaced only once
it is complete. `data/dvc.yaml` tracks it as an output, so a dataset is versioned like any
checkpoint; `metrics/collect.json` says what it holds.

`collect.output` replaces only a dataset that collect wrote, and stays inside the repository
unless `collect.allow_outside_repo` says otherwise: checked before the env is built.
"""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium.spaces as spaces

from pipelines.files import OutputError, StagedOutputs, check_writable, require
from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.stages.progress import Progress
from rlcore.datasets import (
    DatasetError,
    check_replaceable,
    remove_interrupted_saves,
    save_dataset,
)
from rlcore.envs import make_env
from rlcore.errors import ConfigError
from rlcore.policies import Actor, UniformRandomPolicy
from rlcore.recording import CHUNK_STEPS, record_transitions, recorded_steps
from rlcore.runtime import configure_cpu
from rlcore.trained import load_trained_policy


def collect(params: Params, layout: Layout | None = None) -> dict[str, float]:
    """Run the `collect` stage and return the metrics it writes to `metrics/collect.json`."""
    layout = layout or Layout(seed=params.seeds[0])
    configure_cpu(params.runtime.threads)
    cc, cfg = params.collect, params.experiment(seed=layout.seed)
    dataset = check_output(layout.root, cc.output, cc.allow_outside_repo)
    # Both outputs checked before collecting; the metrics appear only with the dataset.
    outputs = StagedOutputs([layout.collect_metrics])
    check_writable(dataset, directory=True)
    remove_interrupted_saves(dataset)
    # Every step a transition (a Gymnasium env resets within the step).
    env = make_env(cfg.env, every_step_a_transition=True)
    policy: Actor | UniformRandomPolicy
    if cc.policy == "random":
        if not isinstance(env.action_space, spaces.Box):
            raise ConfigError(
                f"collect.policy 'random' draws uniform Box actions; {cfg.env.name} has "
                f"{env.action_space}: collect with policy 'trained'"
            )
        policy = UniformRandomPolicy(env.action_space).to(env.device)
        source = "uniform random actions"
    else:
        checkpoint = require(layout.final_checkpoint, "train")
        policy = load_trained_policy(cfg, checkpoint)
        source = f"{checkpoint} (sampled actions)"
    steps = recorded_steps(cc.env_steps, cfg.env.num_envs)
    rounded = "" if steps == cc.env_steps else (
        f" (collect.env_steps {cc.env_steps:,d} rounded up to whole rounds of "
        f"{cfg.env.num_envs} envs x {CHUNK_STEPS} steps)"
    )  # fmt: skip
    print(
        f"[collect] {steps:,d} env steps{rounded} of {cfg.env.name} ({cfg.env.num_envs} envs) "
        f"with {source} -> {cc.output}",
        flush=True,
    )
    start = time.perf_counter()
    progress = Progress("collect", steps, "steps")
    try:
        buffer, episodes = record_transitions(
            env, policy, cc.env_steps, cc.seed, lambda done, total: progress.update(done)
        )
    finally:
        progress.close()
    env.close()
    metrics: dict[str, float] = {
        "transitions": len(buffer),
        "episodes": episodes.returns.numel(),
        "wall_s": round(time.perf_counter() - start, 3),
    }
    if episodes.returns.numel():
        metrics["return_mean"] = episodes.returns.mean().item()
        if episodes.successes is not None:
            metrics["success_rate"] = episodes.successes.double().mean().item()
    described = {"env": cfg.env.name, "policy": source, "experiment": params.name, **metrics}
    # A full disk: the dataset's own one-line DatasetError, or for the metrics the stage's
    # disk-full line (`pipelines.__main__`); the previous outputs stay either way.
    with outputs:
        outputs.write_json(layout.collect_metrics, metrics)
        save_dataset(dataset, buffer, source=described)
    print(f"[collect] done: {metrics}", flush=True)
    return metrics


def check_output(root: Path, output: str, allow_outside_repo: bool) -> Path:
    """The dataset directory `output` names, refused (one line, before any work) where saving
    there could replace something that is not a dataset, or lies outside the repository."""
    dataset = root / output
    resolved, repository = dataset.resolve(), root.resolve()
    if not resolved.is_relative_to(repository) and not allow_outside_repo:
        raise OutputError(
            f"collect.output: {output} resolves to {resolved}, outside the repository "
            f"{repository}; set collect.allow_outside_repo: true to write there (nothing was run)"
        )
    if resolved == repository:
        raise OutputError(f"collect.output: {output} is the repository itself (nothing was run)")
    try:
        check_replaceable(dataset)
    except DatasetError as exc:
        raise OutputError(f"collect.output: {exc} (nothing was run)") from None
    return dataset
