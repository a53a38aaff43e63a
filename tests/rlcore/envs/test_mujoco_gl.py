import os
import subprocess
import sys
import textwrap

import pytest

from rlcore.envs import mujoco_gl

pytest.importorskip("mujoco")

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="offscreen MuJoCo backends are Linux's"
)


def loading_only(monkeypatch, loadable: set[str]) -> None:
    """Shared libraries load only if named in `loadable` (the others, as on a bare machine)."""

    def error(name: str) -> str | None:
        return None if name in loadable else f"lib{name}.so.1: cannot open shared object file"

    monkeypatch.setattr(mujoco_gl, "library_error", error)


@linux_only
@pytest.mark.parametrize(
    ("loadable", "chosen"),
    [({"EGL", "OSMesa"}, "egl"), ({"OSMesa"}, "osmesa"), (set(), "disabled")],
)
def test_a_backend_is_chosen_only_if_its_library_loads(monkeypatch, loadable, chosen):
    loading_only(monkeypatch, loadable)
    before = dict(os.environ)
    assert mujoco_gl.headless_gl_setting({}) == chosen
    assert dict(os.environ) == before  # chosen for the caller to set, never set here
    reason = mujoco_gl.rendering_unavailable({"MUJOCO_GL": chosen})
    assert (reason is None) == (chosen != "disabled")


def test_the_users_choice_and_a_display_are_kept(monkeypatch):
    monkeypatch.setattr(mujoco_gl, "library_error", lambda name: pytest.fail("probed"))
    assert mujoco_gl.headless_gl_setting({"MUJOCO_GL": "osmesa"}) is None
    assert mujoco_gl.headless_gl_setting({"DISPLAY": ":0"}) is None
    assert mujoco_gl.rendering_unavailable({"MUJOCO_GL": "egl"}) is None
    assert mujoco_gl.rendering_unavailable({"DISPLAY": ":0"}) is None


@linux_only
def test_without_a_display_or_mujoco_gl_rendering_says_which_backend_to_set(monkeypatch):
    loading_only(monkeypatch, {"OSMesa"})
    reason = mujoco_gl.rendering_unavailable({})
    assert reason is not None and reason.startswith("no display, and MUJOCO_GL is not set")
    assert "set MUJOCO_GL=osmesa before mujoco is imported (libOSMesa loads here)" in reason


@linux_only
def test_when_every_backend_fails_one_message_names_each_and_why(monkeypatch):
    loading_only(monkeypatch, set())
    reason = mujoco_gl.rendering_unavailable({})
    assert reason is not None
    assert (
        "tried MUJOCO_GL=egl: libEGL does not load (libEGL.so.1: cannot open shared object "
        "file); MUJOCO_GL=osmesa: libOSMesa does not load (libOSMesa.so.1: cannot open shared "
        "object file): install EGL (Debian: libegl1) or OSMesa (libosmesa6)"
    ) in reason
    off = mujoco_gl.rendering_unavailable({"MUJOCO_GL": "disabled"})
    assert off is not None and off.startswith("MuJoCo rendering is off (MUJOCO_GL=disabled)")
    assert "tried MUJOCO_GL=egl" in off and "\n" not in off


@linux_only
def test_without_any_gl_library_mujoco_steps_and_only_rendering_fails_with_one_line():
    """A fresh process where libEGL and libOSMesa do not load (simulated), set up as the CLI
    sets itself up (`headless_render_env`): importing and stepping the native env works;
    rendering raises a ConfigError naming MUJOCO_GL and why each backend failed."""
    script = textwrap.dedent(
        """
        import ctypes
        real = ctypes.CDLL
        def no_gl(name, *args, **kwargs):
            if name and ("EGL" in name or "OSMesa" in name):
                raise OSError(f"{name}: cannot open shared object file")
            return real(name, *args, **kwargs)
        ctypes.CDLL = no_gl
        import os
        from rlcore.envs.headless import headless_render_env
        os.environ.update(headless_render_env())
        import torch
        from rlcore.envs.mujoco_batch import MujocoEnv
        from rlcore.envs.base import StepSlot
        from rlcore.errors import ConfigError
        env = MujocoEnv("HalfCheetah", 2, nthread=1)
        env.reset(seed=0)
        slot = StepSlot.allocate(2, env.obs_spec, env.device, env.has_success)
        env.step(torch.zeros(2, 6), slot)
        finite = bool(slot.next_obs["state"].isfinite().all())
        print("MUJOCO_GL", os.environ["MUJOCO_GL"], "stepped", finite)
        try:
            env.render()
        except ConfigError as exc:
            print("render:", exc)
        """
    )
    unset = ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "MUJOCO_GL disabled stepped True"
    assert lines[1].startswith("render: mujoco:HalfCheetah cannot render: MuJoCo rendering is off")
    assert "MUJOCO_GL=disabled" in lines[1] and "libegl1" in lines[1]
    assert "MUJOCO_GL=egl: libEGL does not load" in lines[1]
    assert "MUJOCO_GL=osmesa: libOSMesa does not load" in lines[1]
