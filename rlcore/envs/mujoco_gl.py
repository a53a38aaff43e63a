"""Offscreen OpenGL for MuJoCo on machines without a display, chosen by what loads.

MuJoCo reads `MUJOCO_GL` once, when `mujoco` is imported, and imports the backend's
bindings then: with `egl` on a machine without libEGL, that import crashes inside PyOpenGL
although stepping a simulation needs no OpenGL at all. So a backend is chosen only if its
library loads (EGL, then OSMesa); with neither, rendering is switched off
(`MUJOCO_GL=disabled`), simulation works, and only rendering fails, saying why
(`rendering_unavailable`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# MUJOCO_GL value -> the shared library it needs, in order of preference.
OFFSCREEN_BACKENDS = (("egl", "EGL"), ("osmesa", "OSMesa"))
DISABLED = "disabled"

_unavailable: str | None = None  # why this process switched rendering off


def library_loads(name: str) -> bool:
    """Whether the shared library `name` (e.g. "EGL" for libEGL) can be loaded here."""
    for candidate in (ctypes.util.find_library(name), f"lib{name}.so.1", f"lib{name}.so"):
        if not candidate:
            continue
        try:
            ctypes.CDLL(candidate)
        except OSError:
            continue
        return True
    return False


def prefer_offscreen_gl() -> str | None:
    """Set `MUJOCO_GL` where no display is set and the user has not; return its value.

    Call it before `mujoco` is imported (Gymnasium's MuJoCo envs read it too). Set
    `MUJOCO_GL` yourself (`osmesa`, `glfw`, `disabled`) to choose another.
    """
    global _unavailable
    if "MUJOCO_GL" in os.environ or os.environ.get("DISPLAY"):
        return os.environ.get("MUJOCO_GL")
    for backend, library in OFFSCREEN_BACKENDS:
        if library_loads(library):
            os.environ["MUJOCO_GL"] = backend
            return backend
    os.environ["MUJOCO_GL"] = DISABLED
    _unavailable = "no display, and neither libEGL nor libOSMesa can be loaded"
    return DISABLED


def rendering_unavailable() -> str | None:
    """Why MuJoCo cannot render in this process, as one line naming `MUJOCO_GL` and what
    to install; None when a backend was chosen (or the user chose one)."""
    if _unavailable is None or os.environ.get("MUJOCO_GL") != DISABLED:
        return None
    return (
        f"MuJoCo rendering is off (MUJOCO_GL={DISABLED}): {_unavailable}; install EGL "
        f"(Debian: libegl1) or OSMesa (libosmesa6), or set MUJOCO_GL to a backend that "
        f"works here; training and evaluation do not need it"
    )
