"""What a process without a display must set in its environment for envs to render
offscreen, as values for its entry point to set: rlcore reads `os.environ` and never writes
it (a library that did would change the process it is imported into behind its back).

`python -m pipelines` sets them at its entry (`pipelines.stages.run.set_render_env`); a
library user sets them in the shell, or first thing in a script, before `mujoco` or `pygame`
is imported, with `os.environ.update(headless_render_env())` (docs/guide.md, "Rendering
without a display"). Values already set are never returned, so they are kept.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from rlcore.envs.mujoco_gl import has_display, headless_gl_setting


def headless_render_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables (and values) that rendering without a display needs and `environ`
    lacks; empty where a display is set.

    - `SDL_VIDEODRIVER`, `SDL_AUDIODRIVER` = `dummy`: pygame-drawn envs (Gymnasium's classic
      control) draw offscreen; without them SDL prints "error: XDG_RUNTIME_DIR is invalid",
      which reads like an error of the run's;
    - `MUJOCO_GL` (where mujoco is installed): an offscreen backend whose library loads
      here, or `disabled` (`rlcore.envs.mujoco_gl.headless_gl_setting`).
    """
    if has_display(environ):
        return {}
    wanted = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}
    gl = headless_gl_setting(environ) if importlib.util.find_spec("mujoco") else None
    if gl is not None:
        wanted["MUJOCO_GL"] = gl
    return {key: value for key, value in wanted.items() if key not in environ}
