"""Native batched MuJoCo: Gymnasium's `-v5` locomotion tasks on `mujoco.batch` (CPU) or
MuJoCo Warp (CUDA), writing into the rollout with torch ops (the `[mujoco]` extra).

Importing this package before `mujoco` picks offscreen EGL rendering where no display is
set (MuJoCo reads MUJOCO_GL once, at its import); set MUJOCO_GL yourself to choose another.
"""

from __future__ import annotations

import os

if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

try:
    import mujoco  # noqa: F401
except ImportError as exc:  # the optional extra is not installed
    from rlcore.errors import MissingExtraError

    raise MissingExtraError(
        "the native MuJoCo envs need the mujoco extra: pip install 'rlcore[mujoco]'"
    ) from exc

from rlcore.envs.mujoco_batch.env import MujocoEnv, MujocoEnvError
from rlcore.envs.mujoco_batch.tasks import TASKS

__all__ = ["TASKS", "MujocoEnv", "MujocoEnvError"]
