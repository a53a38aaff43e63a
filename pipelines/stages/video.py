"""The `video` stage: a few deterministic evaluation episodes, tiled into one MP4."""

from __future__ import annotations

import contextlib
import math
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import torch
from tensordict import TensorDict

from pipelines.files import OutputError, StagedOutputs, require, shown_output
from pipelines.layout import Layout
from pipelines.params import Params
from pipelines.stages.progress import Progress
from rlcore.envs import make_env
from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.runtime import configure_cpu
from rlcore.trained import build_policy, load_trained_policy

BORDER = 2
BORDER_GRAY = 40


# H.264 at constant quality 15 (imageio's quality 7 of 10, what this stage always wrote).
H264 = ["-an", "-vcodec", "libx264", "-pix_fmt", "yuv420p", "-crf", "15", "-f", "mp4"]


class VideoError(OutputError):
    """ffmpeg could not encode or write the video (the message is its last words)."""


class Encoder:
    """ffmpeg (imageio-ffmpeg's binary) fed raw RGB frames on stdin, writing an MP4.

    Its log is kept apart and its exit status checked: a full disk or a failed encoder is
    one `VideoError` naming ffmpeg's last line, never a truncated video taken for a whole one.
    """

    def __init__(self, path: Path, fps: int) -> None:
        self.path, self.fps = path, fps
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close or kill)
        self.process: subprocess.Popen[bytes] | None = None

    def write(self, frame: np.ndarray) -> None:
        if self.process is None:
            height, width = frame.shape[:2]
            command = [
                imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-v", "error", "-f", "rawvideo",
                "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", str(self.fps), "-i", "-",
                *H264, str(self.path),
            ]  # fmt: skip
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.log
            )
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(np.ascontiguousarray(frame).tobytes())
        except BrokenPipeError:  # ffmpeg has stopped: its log says why
            self.process.wait()
            raise self._failure() from None

    def close(self) -> None:
        """Wait for ffmpeg to finish the file; `VideoError` unless it did."""
        if self.process is not None:
            assert self.process.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
            if self.process.wait() != 0:
                raise self._failure()
        self.log.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def _failure(self) -> VideoError:
        assert self.process is not None
        self.log.seek(0)
        said = [line.strip() for line in self.log.read().decode(errors="replace").splitlines()]
        said = [line for line in said if line]
        code = self.process.returncode
        if said:
            last = said[-1]
        elif code < 0:
            last = f"ffmpeg was stopped by {signal.Signals(-code).name}"
        else:
            last = f"ffmpeg's exit status {code}"
        full = code == -signal.SIGXFSZ or any(
            m in " ".join(said) for m in ("No space left", "File too large", "Disk quota")
        )
        why = "disk full" if full else "ffmpeg failed"
        shown = shown_output(self.path)
        return VideoError(f"{why} while writing {shown} ({last}); the previous video is intact")


@contextlib.contextmanager
def encoding(path: Path, fps: int) -> Iterator[Encoder]:
    """An `Encoder` whose ffmpeg is finished when the block ends, or killed if it fails."""
    encoder = Encoder(path, fps)
    try:
        yield encoder
    except BaseException:
        encoder.kill()
        raise
    encoder.close()


def tile(frames: torch.Tensor, columns: int) -> np.ndarray:
    """Lay `n` frames out on a grid with `columns` columns and a thin border.

    Shape:
        frames: [n, S, W, 3] uint8 -> [H, W', 3] uint8 with H and W' even (H.264 needs it)
    """
    n, size, wide = frames.shape[0], frames.shape[1], frames.shape[2]
    columns = min(columns, n)
    rows = math.ceil(n / columns)
    height = rows * size + (rows + 1) * BORDER
    width = columns * wide + (columns + 1) * BORDER
    grid = np.full((height + height % 2, width + width % 2, 3), BORDER_GRAY, dtype=np.uint8)
    cells = frames.cpu().numpy()
    for i in range(n):
        top = BORDER + (i // columns) * (size + BORDER)
        left = BORDER + (i % columns) * (wide + BORDER)
        grid[top : top + size, left : left + wide] = cells[i]
    return grid


def agent_view(images: list[torch.Tensor], size: int) -> torch.Tensor:
    """What the actor sees, as `size` x `size` RGB frames side by side, one per image entry:
    its newest frame (the last 3 channels of a stacked or RGB image, a gray one's last
    channel repeated), scaled by nearest neighbour so that every camera pixel stays sharp.

    Shape:
        images: each [n, C, h, w] uint8 -> [n, size, size * len(images), 3] uint8
    """
    views = []
    for image in images:
        rgb = image[:, -3:] if image.shape[1] % 3 == 0 else image[:, -1:].expand(-1, 3, -1, -1)
        scaled = torch.nn.functional.interpolate(rgb.float(), size=(size, size), mode="nearest")
        views.append(scaled.to(torch.uint8).permute(0, 2, 3, 1))
    return torch.cat(views, dim=2)


def _scenes(
    env: BatchedEnv, obs: TensorDict, keys: list[str], ids: torch.Tensor | None, size: int
) -> torch.Tensor:
    """The scene of each instance (all, or `ids`), with the actor's view beside it."""
    scene = env.render(ids, size=size)
    if not keys:
        return scene
    images = [obs[key] if ids is None else obs[key][ids] for key in keys]
    return torch.cat([scene, agent_view(images, size).to(scene.device)], dim=2)


@torch.inference_mode()
def record(params: Params, layout: Layout | None = None) -> dict[str, float]:
    """Write `outputs/video/episodes.mp4` (and `metrics/video.json`) of the policy trained
    on the first of `seeds`.

    An ended episode stays on its last frame, dimmed, until all have ended. With
    `video.agent_view`, what the actor reads of a camera is shown beside each scene.
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
    slot = StepSlot.allocate(env.num_envs, env.obs_spec, env.device, env.has_success)
    running = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    seen = [k for k in policy.actor_keys if env.obs_spec[k].is_image] if vp.agent_view else []
    shown = _scenes(env, obs, seen, None, vp.frame_size)
    print(f"[video] {vp.episodes} episodes of {cfg.env.name}, up to {max_steps} steps", flush=True)
    start, frames = time.perf_counter(), 0
    progress = Progress("video", max_steps + 1, "frames")  # at most; all ended stops sooner
    with outputs, contextlib.closing(progress):
        with encoding(outputs.path(layout.video), vp.fps) as writer:
            for _ in range(max_steps):
                writer.write(tile(shown, vp.columns))
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
                shown[live] = _scenes(env, obs, seen, live, vp.frame_size)
                progress.update(frames)
            writer.write(tile(shown, vp.columns))
            frames += 1
        wall_s = time.perf_counter() - start
        metrics = {"frames": frames, "episodes": vp.episodes, "wall_s": wall_s}
        outputs.write_json(layout.video_metrics, metrics)
    print(f"[video] wrote {layout.video} ({frames} frames) in {metrics['wall_s']:.1f}s", flush=True)
    return metrics
