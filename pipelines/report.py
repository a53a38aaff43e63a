"""The `report` stage: a Markdown page of this run, with its learning curve as a PNG."""

from __future__ import annotations

import math
import os
from pathlib import Path

from pipelines.files import atomic_path, read_csv, read_json, write_text
from pipelines.layout import Layout
from pipelines.params import Params


def plot_curve(rows: list[dict[str, float]], path: Path, title: str) -> None:
    """Evaluation return (and training return) against env steps, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    steps = [r["env_steps"] for r in rows]
    ax.plot(steps, [r["eval_return"] for r in rows], marker="o", ms=3, label="evaluation")
    train = [
        (r["env_steps"], r["train_return"])
        for r in rows
        if not math.isnan(r.get("train_return", math.nan))
    ]
    if train:
        ax.plot(*zip(*train, strict=True), alpha=0.6, label="training episodes")
    ax.set(xlabel="env steps", ylabel="episode return", title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def _table(metrics: dict[str, float]) -> str:
    lines = ["| metric | value |", "|---|---|"]
    for key in sorted(metrics):
        value = metrics[key]
        shown = f"{value:,.4g}" if isinstance(value, float) else f"{value:,}"
        lines.append(f"| {key} | {shown} |")
    return "\n".join(lines)


def _algorithm_line(params: Params) -> str:
    if params.algorithm.name == "grpo":
        grpo = params.algorithm.grpo
        return (
            f"GRPO (groups of {grpo.group_size}, {grpo.episode_mode}, "
            f"KL coefficient {grpo.kl_coef:g})"
        )
    return "PPO"


def _optimizer_line(params: Params) -> str:
    algo = params.algorithm
    cfg = algo.grpo if algo.name == "grpo" else algo.ppo
    line = (
        f"lr {cfg.lr:g} ({cfg.lr_schedule}), {cfg.num_epochs} epochs x "
        f"{cfg.num_minibatches} minibatches, gamma {cfg.gamma:g}"
    )
    if algo.name == "ppo":
        line += f", GAE lambda {algo.ppo.gae_lambda:g}"
    return f"{line}, clip {cfg.clip_eps:g}"


def render_report(params: Params, layout: Layout) -> str:
    """The page's Markdown (the curve PNG must be written beside it)."""
    train = read_json(layout.train_metrics, "train")
    evaluation = read_json(layout.eval_metrics, "evaluate")
    env, trainer = params.env, params.trainer
    video = os.path.relpath(layout.video, layout.report_dir)
    return f"""# {params.name}

{_algorithm_line(params)} on `{env.name}`: {env.num_envs} envs x {trainer.num_steps} steps
per rollout, {trainer.total_env_steps:,} env steps budget, seed {trainer.seed}; policy
{list(params.policy.hidden_sizes)} {params.policy.activation}; {_optimizer_line(params)}.

## Evaluation

{evaluation["episodes"]} deterministic episodes on seed {params.evaluation.seed} (never used
in training): return **{evaluation["return_mean"]:.2f} ± {evaluation["return_std"]:.2f}**.

{_table(evaluation)}

## Training

{_table(train)}

![learning curve]({layout.curve_png.name})

## Video

[{params.video.episodes} evaluation episodes]({video}) (`dvc pull` or `dvc repro video` if
it is not in your workspace).
"""


def report(params: Params, layout: Layout | None = None) -> Path:
    """Write `reports/run/report.md` and `reports/run/curve.png`; return the page's path."""
    layout = layout or Layout()
    rows = read_csv(layout.curve, "train")
    text = render_report(params, layout)
    plot_curve(rows, layout.curve_png, f"{params.name}: learning curve")
    write_text(layout.report, text)
    print(f"[report] wrote {layout.report}", flush=True)
    return layout.report
