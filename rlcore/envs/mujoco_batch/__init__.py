"""Native batched MuJoCo: Gymnasium's `-v5` locomotion tasks on `mujoco.batch` (CPU) or
MuJoCo Warp (CUDA), writing into the rollout through views of it: numpy calls on CPU, torch
ops on CUDA (`ops.py`; the `[mujoco]` extra).

Importing this package before `mujoco` picks an offscreen GL backend whose library loads
(EGL, then OSMesa; with neither, rendering is off and only rendering fails) where no display
is set (`rlcore.envs.mujoco_gl`); set MUJOCO_GL yourself to choose another.
"""

from __future__ import annotations

from rlcore.envs.mujoco_gl import prefer_offscreen_gl

prefer_offscreen_gl()

try:
    import mujoco  # noqa: F401
except ImportError as exc:  # the optional extra is not installed
    from rlcore.errors import MissingExtraError

    raise MissingExtraError(
        "the native MuJoCo envs need the mujoco extra: pip install 'rlplatform[mujoco]'"
    ) from exc

from rlcore.envs.mujoco_batch.env import MujocoEnv, MujocoEnvError  # noqa: E402 (after the GL)
from rlcore.envs.mujoco_batch.tasks import TASKS  # noqa: E402

__all__ = ["TASKS", "MujocoEnv", "MujocoEnvError"]
