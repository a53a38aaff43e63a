"""The `video` stage: a few deterministic evaluation episodes, tiled into one MP4."""

from __future__ import annotations

import contextlib
import math
import time

import imageio.v2 as imageio
import numpy as np
import torch

from pipelines.files import StagedOutputs, require
from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.progress import Progress
from rlcore.envs import make_env
from rlcore.envs.base import StepSlot
from rlcore.runtime import configure_cpu
from rlcore.trained import build_policy, load_trained_policy

BORDER = 2
BORDER_GRAY = 40


def tile(frames: torch.Tensor, columns: int) -> np.ndarray:
    """Lay `n` frames out on a grid with `columns` columns and a thin border.

    Shape:
        frames: [n, S, S, 3] uint8 -> [H, W, 3] uint8 with H and W even (H.264 needs it)
    """
    n, size = frames.shape[0], frames.shape[1]
    columns = min(columns, n)
    rows = math.ceil(n / columns)
    height = rows * size + (rows + 1) * BORDER
    width = columns * size + (columns + 1) * BORDER
    grid = np.full((height + height % 2, width + width % 2, 3), BORDER_GRAY, dtype=np.uint8)
    cells = frames.cpu().numpy()
    for i in range(n):
        top = BORDER + (i // columns) * (size + BORDER)
        left = BORDER + (i % columns) * (size + BORDER)
        grid[top : top + size, left : left + size] = cells[i]
    return grid


@torch.inference_mode()
def record(params: Params, layout: Layout | None = None) -> dict[str, float]:
    """Write `outputs/video/episodes.mp4` (and `metrics/video.json`) of the policy trained
    on the first of `seeds`.

    An ended episode stays on its last frame, dimmed, until all have ended.
    """
    layout = (layout or Layout()).for_seed(params.seeds[0])
    configure_cpu(params.runtime.threads)
    cfg, vp = params.experiment(seed=layout.seed), params.video
    outputs = StagedOutputs([layout.video, layout.video_metrics])  # checked before recording
    # A bad env setting, or an algorithm that cannot drive the env, fails before anything.
    env = make_env(cfg.env, num_envs=vp.episodes, render_size=vp.frame_size)
    build_policy(cfg, env)
    checkpoint = require(layout.checkpoint(params.evaluation.checkpoint), "train")
    policy = load_trained_policy(cfg, checkpoint, env=env)
    max_steps = vp.max_steps or env.max_episode_steps
    obs = env.reset(seed=vp.seed)
    slot = StepSlot.allocate(env.num_envs, env.obs_dim, env.device, env.has_success)
    running = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    shown = env.render(size=vp.frame_size)
    print(f"[video] {vp.episodes} episodes of {cfg.env.name}, up to {max_steps} steps", flush=True)
    start, frames = time.perf_counter(), 0
    progress = Progress("video", max_steps + 1, "frames")  # at most; all ended stops sooner
    with outputs, contextlib.closing(progress):
        writer = imageio.get_writer(
            outputs.path(layout.video),
            format="FFMPEG",
            fps=vp.fps,
            codec="libx264",
            quality=7,
            macro_block_size=1,
        )
        with writer:
            for _ in range(max_steps):
                writer.append_data(tile(shown, vp.columns))
                frames += 1
                env.step(policy.act_deterministic(obs), slot)
                obs = slot.next_obs
                ended = running & slot.done
                # Frames of ended episodes freeze (dimmed); auto-reset states are not shown.
                shown[ended] = shown[ended] // 2
                running &= ~slot.done
                if not running.any():
                    break
                live = running.nonzero().squeeze(1)
                shown[live] = env.render(live, size=vp.frame_size)
                progress.update(frames)
            writer.append_data(tile(shown, vp.columns))
            frames += 1
        wall_s = time.perf_counter() - start
        metrics = {"frames": frames, "episodes": vp.episodes, "wall_s": wall_s}
        outputs.write_json(layout.video_metrics, metrics)
    print(f"[video] wrote {layout.video} ({frames} frames) in {metrics['wall_s']:.1f}s", flush=True)
    return metrics
