"""The Warp engine keeps Warp's per-kernel "Module ... load on device" lines (info) out of
the stage's log, on the real Warp package: it raises Warp's default logging threshold and
keeps one a user lowered for detail. (Warp 1.19 has `config.log_level`; reading the flags of
earlier releases, `config.verbose`, crashed every Warp run.)"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mujoco_warp")

import warp as wp

from rlcore.envs.mujoco_batch import MujocoEnv

# A fresh process: Warp prints a line per kernel module it loads, compiled or cached (42 for
# this run without the threshold raised).
SCRIPT = textwrap.dedent(
    """
    import torch
    import warp as wp
    from rlcore.envs.base import StepSlot
    from rlcore.envs.mujoco_batch import MujocoEnv

    env = MujocoEnv("HalfCheetah", 2, engine="warp")
    env.reset(seed=0)
    env.step(torch.zeros(2, env.action_dim), StepSlot.allocate(2, env.obs_spec, env.device, False))
    print("level", wp.config.log_level)
    """
)


@pytest.mark.parametrize(
    ("user_level", "after"), [(None, wp.LOG_WARNING), (wp.LOG_DEBUG, wp.LOG_DEBUG)]
)
def test_warp_runs_quiet_unless_the_user_asked_for_detail(monkeypatch, user_level, after):
    saved = wp.config.log_level
    monkeypatch.setattr(wp.config, "log_level", wp.LOG_INFO if user_level is None else user_level)
    try:
        MujocoEnv("HalfCheetah", 2, engine="warp").reset(seed=0)
        assert wp.config.log_level == after
    finally:
        wp.config.log_level = saved


def test_a_warp_run_prints_no_module_load_lines():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    assert f"level {wp.LOG_WARNING}" in out
    assert "Module" not in out and "load on device" not in out, out[-2000:]
