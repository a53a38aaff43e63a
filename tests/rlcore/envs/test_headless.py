import ast
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlcore.envs import mujoco_gl
from rlcore.envs.headless import headless_render_env

RLCORE = Path(__file__).resolve().parents[3] / "rlcore"
# What the CLI (and tests/conftest.py) set: these must not be set in a process that checks
# that rlcore sets none of them.
RENDER_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER")


def test_without_a_display_the_render_variables_not_set_are_returned(monkeypatch):
    monkeypatch.setattr(mujoco_gl, "library_error", lambda name: None)  # EGL loads
    wanted = headless_render_env({"SDL_VIDEODRIVER": "x11"})
    assert wanted.pop("SDL_AUDIODRIVER") == "dummy"
    if importlib.util.find_spec("mujoco") and sys.platform.startswith("linux"):
        assert wanted.pop("MUJOCO_GL") == "egl"
    assert wanted == {}  # the SDL_VIDEODRIVER set is kept
    assert headless_render_env({"DISPLAY": ":0"}) == {}
    assert headless_render_env({"WAYLAND_DISPLAY": "wayland-0"}) == {}


def _writes_environ(node: ast.AST) -> bool:
    """`os.environ[k] = v`, `del os.environ[k]`, `os.environ.setdefault/update/pop/...(...)`,
    `os.putenv(...)`, `os.unsetenv(...)`."""

    def is_environ(expr: ast.AST) -> bool:
        return ast.unparse(expr) in ("os.environ", "environ")

    if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        return any(isinstance(t, ast.Subscript) and is_environ(t.value) for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        mutators = ("setdefault", "update", "pop", "popitem", "clear", "__setitem__")
        if node.func.attr in mutators and is_environ(node.func.value):
            return True
        return ast.unparse(node.func) in ("os.putenv", "os.unsetenv")
    return False


def test_no_rlcore_module_writes_the_process_environment():
    """rlcore may read os.environ; the program's entry point sets it (pipelines does)."""
    writes = [
        f"{path.relative_to(RLCORE.parent)}:{node.lineno}"
        for path in sorted(RLCORE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if _writes_environ(node)
    ]
    assert writes == []


def test_importing_building_stepping_and_rendering_gym_envs_leaves_os_environ_as_it_was():
    """A fresh process without display or render settings: os.environ after importing rlcore
    and building, stepping and rendering Gymnasium envs (classic control and MuJoCo) and a
    native MuJoCo env is what it was before. The libraries rlcore builds on are imported
    first: some set variables of their own when imported (gymnasium, torch._dynamo)."""
    pytest.importorskip("mujoco")
    script = textwrap.dedent(
        """
        import os
        import gymnasium, mujoco, pygame, tensordict, torch, torch._dynamo
        before = dict(os.environ)
        import rlcore
        from rlcore.envs.base import StepSlot
        from rlcore.envs.gym_bridge import GymnasiumBridgeError, GymnasiumEnv
        from rlcore.envs.mujoco_batch import MujocoEnv, MujocoEnvError
        envs = [
            GymnasiumEnv("CartPole-v1", 2),
            GymnasiumEnv("Pendulum-v1", 2, autoreset="same-step"),
            GymnasiumEnv("HalfCheetah-v5", 2),
            MujocoEnv("Hopper", 2, nthread=1),
        ]
        for env in envs:
            env.reset(seed=0)
            slot = StepSlot.allocate(2, env.obs_spec, env.device, env.has_success)
            discrete = env.name.endswith("CartPole-v1")
            for _ in range(3):
                env.step(torch.zeros(2, dtype=torch.long) if discrete else
                         torch.zeros(2, env.action_dim), slot)
            try:
                print(env.name, tuple(env.render(size=16).shape))
            except (GymnasiumBridgeError, MujocoEnvError) as exc:
                print(env.name, "cannot render")
            env.close()
        after = dict(os.environ)
        print({k for k in before.keys() | after.keys() if before.get(k) != after.get(k)})
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in RENDER_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=RLCORE.parent,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "set()"  # no variable added, changed or removed
    assert lines[0] == "gymnasium:CartPole-v1 (2, 16, 16, 3)"  # pygame draws without them
    if sys.platform.startswith("linux"):  # no MUJOCO_GL, no display: told what to set
        cannot = ["gymnasium:HalfCheetah-v5 cannot render", "mujoco:Hopper cannot render"]
        assert lines[2:4] == cannot
