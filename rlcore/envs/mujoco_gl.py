"""Offscreen OpenGL for MuJoCo where no display is set: which backend can work here, and why
rendering cannot.

MuJoCo reads `MUJOCO_GL` once, when `mujoco` is imported, and imports the backend's
bindings then: with `egl` on a machine without libEGL, that import crashes inside PyOpenGL
although stepping a simulation needs no OpenGL at all; left unset on Linux without a
display, MuJoCo picks GLFW, which cannot draw there. So the backend to set is one whose
library loads (EGL, then OSMesa), or `disabled` with neither: `headless_gl_setting`.

This module reads the process environment and never writes it: the program's entry point
sets `MUJOCO_GL` before `mujoco` is imported (`python -m pipelines` does, through
`rlcore.envs.headless`; a library user sets it in the shell: docs/guide.md). Where it is
missing or `disabled`, simulation still works, and rendering fails with one line that says
what was tried and what to set (`rendering_unavailable`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

# MUJOCO_GL value -> the shared library it needs, in order of preference.
OFFSCREEN_BACKENDS = (("egl", "EGL"), ("osmesa", "OSMesa"))
DISABLED = "disabled"
_OFF = ("disable", "disabled", "off", "false", "0")  # MuJoCo's spellings of "no rendering"


def has_display(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether `environ` names an X11 or Wayland display to draw on."""
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def library_error(name: str) -> str | None:
    """Why the shared library `name` (e.g. "EGL" for libEGL) cannot be loaded here; None
    when it loads."""
    found = ctypes.util.find_library(name)
    errors = []
    for candidate in dict.fromkeys((found, f"lib{name}.so.1", f"lib{name}.so")):
        if not candidate:
            continue
        try:
            ctypes.CDLL(candidate)
        except OSError as exc:  # not installed, or not loadable here
            errors.append(str(exc))
            continue
        return None
    return errors[0] if errors else f"lib{name} not found"


@dataclass(frozen=True)
class OffscreenGL:
    """The offscreen backend that can work here, and why each one before it cannot."""

    backend: str  # a MUJOCO_GL value: "egl", "osmesa", or DISABLED when none loads
    failures: tuple[str, ...]  # "MUJOCO_GL=egl: libEGL does not load (...)", in order tried


def offscreen_gl() -> OffscreenGL:
    """Probe the offscreen backends in order of preference (`OFFSCREEN_BACKENDS`)."""
    failures = []
    for backend, library in OFFSCREEN_BACKENDS:
        error = library_error(library)
        if error is None:
            return OffscreenGL(backend, tuple(failures))
        failures.append(f"MUJOCO_GL={backend}: lib{library} does not load ({error})")
    return OffscreenGL(DISABLED, tuple(failures))


def _needs_offscreen(environ: Mapping[str, str]) -> bool:
    """Linux without a display, where MuJoCo's default (GLFW) cannot draw."""
    return sys.platform.startswith("linux") and not has_display(environ)


def headless_gl_setting(environ: Mapping[str, str] = os.environ) -> str | None:
    """The `MUJOCO_GL` to set before `mujoco` is imported, for frames without a display
    (`offscreen_gl`); None where nothing need be set (a display, a value already set)."""
    if "MUJOCO_GL" in environ or not _needs_offscreen(environ):
        return None
    return offscreen_gl().backend


def rendering_unavailable(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why MuJoCo cannot render in this process, as one line naming `MUJOCO_GL`, what was
    tried and what to install or set; None when it can be tried."""
    value = environ.get("MUJOCO_GL")
    if value is not None and value.strip().lower() in _OFF:
        why = f"MuJoCo rendering is off (MUJOCO_GL={value})"
    elif value is None and _needs_offscreen(environ):
        why = "no display, and MUJOCO_GL is not set (MuJoCo's default, GLFW, needs a display)"
    else:
        return None
    choice = offscreen_gl()
    if choice.backend != DISABLED:
        library = dict(OFFSCREEN_BACKENDS)[choice.backend]
        fix = f"set MUJOCO_GL={choice.backend} before mujoco is imported (lib{library} loads here)"
    else:
        fix = (
            f"tried {'; '.join(choice.failures)}: install EGL (Debian: libegl1) or OSMesa "
            f"(libosmesa6) and set MUJOCO_GL to it before mujoco is imported"
        )
    return f"{why}; {fix}; training and evaluation do not need it"


def renderer_unavailable_errors() -> tuple[type[Exception], ...]:
    """The exceptions that mean "no OpenGL renderer here" when a MuJoCo renderer is made or
    draws; any other is a fault, raised as it is.

    MuJoCo's `FatalError` (no GL context: "an OpenGL platform library has not been loaded"),
    `ImportError` (a backend's bindings: MuJoCo's placeholder where PyOpenGL or glfw is
    missing), `OSError` (a GL library that does not load), `RuntimeError` (Gymnasium's "No
    OpenGL backend could be imported" or an invalid MUJOCO_GL; pygame's `error`), and
    PyOpenGL's errors where it is loaded.
    """
    errors: list[type[Exception]] = [ImportError, OSError, RuntimeError]
    for module, name in (("mujoco", "FatalError"), ("OpenGL.error", "Error")):
        loaded = sys.modules.get(module)
        if loaded is not None:
            errors.append(getattr(loaded, name))
    return tuple(errors)
