"""Offscreen OpenGL for MuJoCo on machines without a display."""

from __future__ import annotations

import os


def prefer_offscreen_gl() -> None:
    """Pick EGL for MuJoCo's rendering where no display is set and `MUJOCO_GL` is unset.

    Call it before `mujoco` is imported: MuJoCo reads `MUJOCO_GL` once, at its import (and
    by default tries a windowing library that fails without a display; a second attempt to
    create a renderer in the same process then aborts it). Gymnasium's MuJoCo envs read it
    too. Set `MUJOCO_GL` yourself (`osmesa`, `glfw`) to choose another.
    """
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"
