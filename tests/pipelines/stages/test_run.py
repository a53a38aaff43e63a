"""The CLI edge sets what rendering without a display needs (rlcore only reads it)."""

import os

import pytest
import yaml

from pipelines.stages import run
from rlcore.envs import mujoco_gl

TINY = {"name": "tiny", "seeds": [0], "env": {"name": "cartpole", "num_envs": 2}}


@pytest.fixture
def headless(monkeypatch):
    """No display, no render settings, and libEGL loads (wherever the test runs)."""
    for key in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        monkeypatch.setenv(key, "")  # recorded: restored after the test, whatever it sets
        monkeypatch.delenv(key)
    monkeypatch.setattr(mujoco_gl, "library_error", lambda name: None)


def test_set_render_env_sets_only_what_is_not_set(headless, monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "x11")  # the user's choice, kept
    run.set_render_env()
    assert os.environ["SDL_VIDEODRIVER"] == "x11"
    assert os.environ["SDL_AUDIODRIVER"] == "dummy"
    assert os.environ.get("MUJOCO_GL") == mujoco_gl.headless_gl_setting({})


@pytest.mark.parametrize(("stage", "sets"), [("video", True), ("report", False)])
def test_stages_that_build_envs_set_it_before_they_run(
    headless, monkeypatch, tmp_path, stage, sets
):
    seen = {}

    def stage_function(params, layout):
        seen["SDL_VIDEODRIVER"] = os.environ.get("SDL_VIDEODRIVER")

    monkeypatch.setattr(run, "_stage", lambda name: stage_function)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(TINY))
    assert run.run_stage(stage, tmp_path / "params.yaml") == 0
    assert seen == {"SDL_VIDEODRIVER": "dummy" if sets else None}
