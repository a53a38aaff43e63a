"""Frames of a bridged Gymnasium env's instances (`GymnasiumEnv.render`), drawn by the
instances' own renderers (`render_mode="rgb_array"`, chosen when the bridge builds the env:
`rlcore.envs.gym_build`) and resized on the host."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium
import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rlcore.envs.gym_spaces import GymnasiumBridgeError
from rlcore.envs.mujoco_gl import rendering_unavailable


def _plain_mujoco_scenes(instances: Sequence[gymnasium.Env]) -> None:
    """Turn off shadows and reflections in Gymnasium's MuJoCo offscreen renderers, as the
    native envs do: software GL (OSMesa, no GPU) draws a frame ~5x slower with them.

    Reaches into Gymnasium's `MujocoRenderer` (its `_get_viewer`, stable since 0.29); an
    env rendered some other way is left as it is.
    """
    import mujoco

    for instance in instances:
        renderer = getattr(instance.unwrapped, "mujoco_renderer", None)
        try:
            scene = renderer._get_viewer("rgb_array").scn  # type: ignore[union-attr]
            scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        except Exception:  # not Gymnasium's MuJoCo renderer: nothing to turn off
            continue


def _is_mujoco(envs: VectorEnv) -> bool:
    """Whether the env is one of Gymnasium's MuJoCo envs (by its instances, or its entry
    point where the instances live in other processes)."""
    instances = getattr(envs, "envs", None)
    if instances is not None:
        return any(hasattr(i.unwrapped, "mujoco_renderer") for i in instances)
    spec = getattr(envs, "spec", None)
    return spec is not None and "mujoco" in str(spec.entry_point)


class Frames:
    """Draws frames of a Gymnasium vector env's instances, for `GymnasiumEnv.render`."""

    def __init__(self, envs: VectorEnv, name: str) -> None:
        self.envs = envs
        self.name = name
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
        instances = getattr(self.envs, "envs", None)  # sync: render only the envs asked for
        if not self._plain_scenes and instances is not None and self._mujoco:
            _plain_mujoco_scenes(instances)
            self._plain_scenes = True
        try:
            if ids is not None and instances is not None:
                frames = [instances[i].render() for i in ids]
                ids = None
            else:
                frames = self.envs.render()
        except gymnasium.error.DependencyNotInstalled as exc:
            raise GymnasiumBridgeError(f"{self.name} cannot render: {exc}") from None
        except Exception as exc:  # e.g. MuJoCo without an OpenGL platform
            raise GymnasiumBridgeError(
                f"{self.name} cannot render: {exc} (MuJoCo renders offscreen with "
                "MUJOCO_GL=egl or MUJOCO_GL=osmesa)"
            ) from exc
        if frames is None or any(f is None for f in frames):
            raise GymnasiumBridgeError(f"{self.name} does not render (render_mode rgb_array)")
        batch = torch.from_numpy(np.stack([np.asarray(f) for f in frames])[..., :3].copy())
        if ids is not None:
            batch = batch[ids]
        resized = torch.nn.functional.interpolate(
            batch.permute(0, 3, 1, 2).float(), size=(size, size), mode="area"
        )
        return resized.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
