"""Native batched MuJoCo: Gymnasium's `-v5` locomotion tasks on `mujoco.batch` (CPU) or
MuJoCo Warp (CUDA), writing into the rollout through views of it: numpy calls on CPU, torch
ops on CUDA (`ops.py`; the `[mujoco]` extra).

Rendering without a display needs `MUJOCO_GL` set before `mujoco` is imported (an
offscreen backend: `rlcore.envs.mujoco_gl.headless_gl_setting`); `python -m pipelines` sets
it, a library user sets it (docs/guide.md). Without it, simulation works and only rendering
fails, saying what to set.
"""

from __future__ import annotations

try:
    import mujoco  # noqa: F401
except ImportError as exc:  # the optional extra is not installed
    from rlcore.errors import MissingExtraError

    raise MissingExtraError(
        "the native MuJoCo envs need the mujoco extra: pip install 'rlplatform[mujoco]'"
    ) from exc

from rlcore.envs.mujoco_batch.env import MujocoEnv, MujocoEnvError
from rlcore.envs.mujoco_batch.tasks import TASKS

__all__ = ["TASKS", "MujocoEnv", "MujocoEnvError"]
