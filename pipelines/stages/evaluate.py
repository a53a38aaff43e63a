"""The `evaluate` stage: the trained policy's deterministic episodes on fresh seeds."""

from __future__ import annotations

import time

from pipelines.files import check_writable, require, write_json
from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.stages.progress import Progress
from rlcore.envs import make_env
from rlcore.evaluate import run_episodes
from rlcore.runtime import configure_cpu
from rlcore.trained import build_policy, load_trained_policy


def evaluate(params: Params, layout: Layout | None = None) -> dict[str, float]:
    """Evaluate the policy trained on `layout.seed` (default: the first of `seeds`): run
    `evaluation.episodes` episodes in parallel and write `metrics/seeds/<seed>/eval.json`.

    The evaluation seed (`evaluation.seed`) is one the trainer never uses, so the score is
    not the one training stopped on.
    """
    layout = layout or Layout(seed=params.seeds[0])
    configure_cpu(params.runtime.threads)
    cfg = params.experiment(seed=layout.seed)
    ev = params.evaluation
    # A bad env setting, or an algorithm that cannot drive the env, fails before anything.
    env = make_env(cfg.env, num_envs=ev.episodes)
    build_policy(cfg, env)
    check_writable(layout.eval_metrics)
    checkpoint = require(layout.checkpoint(params.evaluation.checkpoint), "train")
    policy = load_trained_policy(cfg, checkpoint, env=env)
    print(
        f"[evaluate] training seed {layout.seed}: {ev.episodes} episodes of {cfg.env.name}, "
        f"evaluation seed {ev.seed}",
        flush=True,
    )
    start = time.perf_counter()
    # Paced in steps: the episodes run side by side and mostly end together at the end.
    progress = Progress("evaluate", env.max_episode_steps, "steps")

    def show(steps: int, finished: int) -> None:
        progress.update(steps, episodes=f"{finished}/{ev.episodes}")

    try:
        episodes = run_episodes(policy, env, seed=ev.seed, progress=show)
    finally:
        progress.close()
    returns = episodes.returns
    metrics = {
        "episodes": ev.episodes,
        "return_mean": returns.mean().item(),
        "return_std": returns.std(unbiased=False).item(),
        "return_min": returns.min().item(),
        "return_max": returns.max().item(),
        "length_mean": episodes.lengths.double().mean().item(),
        "wall_s": round(time.perf_counter() - start, 3),
    }
    if episodes.successes is not None:
        metrics["success_rate"] = episodes.successes.double().mean().item()
    write_json(layout.eval_metrics, metrics)
    print(f"[evaluate] {metrics}", flush=True)
    return metrics
