import os
import subprocess
import sys
import textwrap

import pytest

from rlcore.envs import mujoco_gl

pytest.importorskip("mujoco")


@pytest.fixture
def headless(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(mujoco_gl, "_unavailable", None)


@pytest.mark.parametrize(
    ("loadable", "chosen"),
    [({"EGL", "OSMesa"}, "egl"), ({"OSMesa"}, "osmesa"), (set(), "disabled")],
)
def test_a_backend_is_chosen_only_if_its_library_loads(headless, monkeypatch, loadable, chosen):
    monkeypatch.setattr(mujoco_gl, "library_loads", lambda name: name in loadable)
    assert mujoco_gl.prefer_offscreen_gl() == chosen
    assert os.environ["MUJOCO_GL"] == chosen
    reason = mujoco_gl.rendering_unavailable()
    assert (reason is None) == (chosen != "disabled")


def test_the_users_choice_is_kept(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.setattr(mujoco_gl, "library_loads", lambda name: pytest.fail("probed"))
    assert mujoco_gl.prefer_offscreen_gl() == "osmesa"


def test_without_any_gl_library_mujoco_steps_and_only_rendering_fails_with_one_line():
    """A fresh process where libEGL and libOSMesa do not load (simulated): importing and
    stepping the native env works; rendering raises a ConfigError naming MUJOCO_GL."""
    script = textwrap.dedent(
        """
        import ctypes
        real = ctypes.CDLL
        def no_gl(name, *args, **kwargs):
            if name and ("EGL" in name or "OSMesa" in name):
                raise OSError(f"{name}: cannot open shared object file")
            return real(name, *args, **kwargs)
        ctypes.CDLL = no_gl
        import os, torch
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
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL")}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "MUJOCO_GL disabled stepped True"
    assert lines[1].startswith("render: mujoco:HalfCheetah cannot render: MuJoCo rendering is off")
    assert "MUJOCO_GL=disabled" in lines[1] and "libegl1" in lines[1]
