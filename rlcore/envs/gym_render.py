"""Frames of a bridged Gymnasium env's instances (`GymnasiumEnv.render`), drawn by the
instances' own renderers (`render_mode="rgb_array"`, chosen when the bridge builds the env:
`rlcore.envs.gym_build`) and resized on the host.

A renderer that cannot work here (no OpenGL platform for MuJoCo, pygame missing) fails with
one `GymnasiumBridgeError` naming why and what to set; any other error of a renderer is a
fault, and is raised as it is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import gymnasium
import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rlcore.envs.gym_spaces import GymnasiumBridgeError
from rlcore.envs.mujoco_gl import renderer_unavailable_errors, rendering_unavailable


def _is_mujoco(envs: VectorEnv) -> bool:
    """Whether the env is one of Gymnasium's MuJoCo envs (by its instances, or its entry
    point where the instances live in other processes)."""
    instances = getattr(envs, "envs", None)
    if instances is not None:
        return any(hasattr(i.unwrapped, "mujoco_renderer") for i in instances)
    spec = getattr(envs, "spec", None)
    return spec is not None and "mujoco" in str(spec.entry_point)


def _plain_mujoco_scenes(instances: Sequence[gymnasium.Env]) -> None:
    """Turn off shadows and reflections in Gymnasium's MuJoCo offscreen renderers, as the
    native envs do: software GL (OSMesa, no GPU) draws a frame several times slower with them.

    Reaches into Gymnasium's `MujocoRenderer` (its `_get_viewer`, stable since 0.29), which
    makes the renderer's GL context; an instance rendered some other way is left as it is.
    """
    import mujoco
    from gymnasium.envs.mujoco.mujoco_rendering import MujocoRenderer

    for instance in instances:
        env = instance.unwrapped
        renderer = getattr(env, "mujoco_renderer", None)
        if not isinstance(renderer, MujocoRenderer) or env.render_mode != "rgb_array":
            continue  # nothing of Gymnasium's offscreen renderer to turn off
        scene = renderer._get_viewer("rgb_array").scn
        scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0


class Frames:
    """Draws frames of a Gymnasium vector env's instances, for `GymnasiumEnv.render`.

    `build_failures`: why each way of building the env to render failed, where all did
    (`gym_build.BuiltEnv.render_failures`), for the error that says it does not render.
    """

    def __init__(self, envs: VectorEnv, name: str, build_failures: Sequence[str] = ()) -> None:
        self.envs = envs
        self.name = name
        self._build_failures = tuple(build_failures)
        self._mujoco = _is_mujoco(envs)
        self._plain_scenes = False  # shadows and reflections turned off

    def __call__(self, env_ids: torch.Tensor | None, size: int) -> torch.Tensor:
        """RGB frames of instances `env_ids` (default: all), `size` x `size`, on the CPU.

        Shape:
            return: [k, size, size, 3] uint8
        """
        unavailable = rendering_unavailable() if self._mujoco else None
        if unavailable is not None:
            raise GymnasiumBridgeError(f"{self.name} cannot render: {unavailable}")
        ids = None if env_ids is None else env_ids.to("cpu", torch.long).tolist()
        frames, ids = self._draw(ids)
        if frames is None or any(f is None for f in frames):
            tried = "; ".join(self._build_failures)
            why = f"; built without it, as tried: {tried}" if tried else ""
            raise GymnasiumBridgeError(f"{self.name} does not render (render_mode rgb_array){why}")
        batch = torch.from_numpy(np.stack([np.asarray(f) for f in frames])[..., :3].copy())
        if ids is not None:
            batch = batch[ids]
        resized = torch.nn.functional.interpolate(
            batch.permute(0, 3, 1, 2).float(), size=(size, size), mode="area"
        )
        return resized.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)

    def _draw(self, ids: list[int] | None) -> tuple[Sequence | None, list[int] | None]:
        """The renderers' frames (None where the env draws none), and the ids still to
        select from them (None: all drawn were asked for). A sync env draws only the
        instances asked for."""
        instances = getattr(self.envs, "envs", None)
        try:
            if not self._plain_scenes and instances is not None and self._mujoco:
                _plain_mujoco_scenes(instances)
                self._plain_scenes = True
            if ids is not None and instances is not None:
                return [instances[i].render() for i in ids], None
            return self.envs.render(), ids
        except NotImplementedError:  # `gymnasium.Env.render` itself: the env draws nothing
            return None, ids
        except gymnasium.error.DependencyNotInstalled as exc:  # pygame, for classic control
            raise GymnasiumBridgeError(f"{self.name} cannot render: {exc}") from None
        except renderer_unavailable_errors() as exc:
            hint = ""
            if self._mujoco:
                gl = os.environ.get("MUJOCO_GL", "not set")
                hint = (
                    f" (MUJOCO_GL: {gl}; MuJoCo renders offscreen with MUJOCO_GL=egl or "
                    "MUJOCO_GL=osmesa, set before mujoco is imported)"
                )
            raise GymnasiumBridgeError(
                f"{self.name} cannot render: {type(exc).__name__}: {exc}{hint}"
            ) from exc
