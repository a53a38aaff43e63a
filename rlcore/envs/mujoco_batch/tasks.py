"""Locomotion tasks over an `Engine`: Gymnasium's `-v5` HalfCheetah, Hopper and Ant.

Each task reads the engine's state views and writes observations, rewards and terminations
with torch ops, reproducing Gymnasium's `-v5` definitions with their default arguments
(observations, reward terms and weights, health checks, reset noise, frame skip, time
limit), on the MJCF files that ship with Gymnasium. The forward reward is the progress of
`progress()` over the step divided by `dt = timestep * frame_skip`, as in Gymnasium.

One known difference: Ant's contact forces (`cfrc_ext`, in its observation and contact
cost), because Ant's MJCF integrates with RK4. Gymnasium calls `mj_rnePostConstraint` after
`mj_step`, so its forces come from the derived fields of the last substep's fourth RK4
stage, an intermediate state; a batched engine computes them inside the step (a force sensor
makes MuJoCo do so), at the last substep's start, the first stage. Reproducing Gymnasium's
would take a copy of every simulation's whole MjData after each step (~0.5 MB for Ant, ~18
us per simulation here). With the Euler integrator both sample the same state, and
observations and rewards match Gymnasium's exactly, contact forces included; under RK4,
positions, velocities, the other reward terms and terminations match
(tests/rlcore/envs/test_mujoco_batch.py).
"""

from __future__ import annotations

import abc
import os
from typing import ClassVar

import torch
from torch import Tensor

from rlcore.envs.mujoco_batch.engine import Engine


def gymnasium_asset(xml_file: str) -> str:
    """Path of an MJCF file shipped with Gymnasium (`gymnasium[mujoco]`)."""
    import gymnasium

    return os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", xml_file)


class Task(abc.ABC):
    """What a locomotion task computes from the engine's state (see module docstring)."""

    xml_file: ClassVar[str]
    frame_skip: ClassVar[int]
    max_episode_steps: ClassVar[int] = 1000
    num_actuators: ClassVar[int]
    reset_noise_scale: ClassVar[float]
    # qpos noise is uniform in +-scale; qvel noise is `scale * N(0, 1)` or the same uniform
    qvel_noise: ClassVar[str] = "normal"
    ctrl_cost_weight: ClassVar[float]
    needs_contact_forces: ClassVar[bool] = False
    camera_distance: ClassVar[float] = 4.0

    @abc.abstractmethod
    def obs_dim(self, engine: Engine) -> int:
        """Width of one observation."""

    @abc.abstractmethod
    def observe(self, engine: Engine, out: torch.Tensor) -> None:
        """Write every instance's observation into `out` ([N, obs_dim] float32)."""

    def progress(self, engine: Engine) -> torch.Tensor:
        """The coordinate whose rate of change is rewarded ([N]): the root's x."""
        return engine.qpos[:, 0]

    @abc.abstractmethod
    def reward(
        self, engine: Engine, action: Tensor, x_velocity: Tensor, healthy: Tensor | None
    ) -> Tensor:
        """The step's reward ([N]) after the engine stepped; `healthy` is `healthy()`'s."""

    def healthy(self, engine: Engine) -> torch.Tensor | None:
        """Where each instance is healthy ([N] bool), or None for a task that never ends."""
        return None

    def noise(
        self, count: int, nq: int, nv: int, generator: torch.Generator, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Initial-state perturbations of qpos ([count, nq]) and qvel ([count, nv])."""
        scale, f64 = self.reset_noise_scale, torch.float64

        def uniform(width: int) -> torch.Tensor:
            u = torch.rand(count, width, generator=generator, device=device, dtype=f64)
            return (u * 2 - 1) * scale

        if self.qvel_noise == "uniform":
            return uniform(nq), uniform(nv)
        return uniform(nq), torch.randn(
            count, nv, generator=generator, device=device, dtype=f64
        ) * scale

    def ctrl_cost(self, action: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vecdot(action, action).mul_(self.ctrl_cost_weight)


class PlanarTask(Task):
    """A planar walker observed as `qpos[1:]` (all but the root's x) and `qvel`, clipped to
    +-`qvel_clip` where the task says so."""

    qvel_clip: ClassVar[float | None] = None

    def obs_dim(self, engine: Engine) -> int:
        return engine.model.nq - 1 + engine.model.nv

    def observe(self, engine: Engine, out: torch.Tensor) -> None:
        nq = engine.model.nq - 1
        out[:, :nq] = engine.qpos[:, 1:]
        clip = self.qvel_clip
        out[:, nq:] = engine.qvel if clip is None else engine.qvel.clamp(-clip, clip)


class HalfCheetah(PlanarTask):
    xml_file = "half_cheetah.xml"
    num_actuators = 6
    frame_skip = 5
    reset_noise_scale = 0.1
    ctrl_cost_weight = 0.1
    camera_distance = 4.0

    def reward(
        self, engine: Engine, action: Tensor, x_velocity: Tensor, healthy: Tensor | None
    ) -> Tensor:
        return x_velocity - self.ctrl_cost(action)


class Hopper(PlanarTask):
    xml_file = "hopper.xml"
    num_actuators = 3
    frame_skip = 4
    reset_noise_scale = 5e-3
    qvel_noise = "uniform"
    ctrl_cost_weight = 1e-3
    qvel_clip = 10.0
    camera_distance = 4.0

    def healthy(self, engine: Engine) -> torch.Tensor:
        qpos, qvel = engine.qpos, engine.qvel
        state_ok = (qpos[:, 2:].abs() < 100.0).all(1) & (qvel.abs() < 100.0).all(1)
        z, angle = qpos[:, 1], qpos[:, 2]
        return state_ok & (z > 0.7) & (angle > -0.2) & (angle < 0.2)

    def reward(
        self, engine: Engine, action: Tensor, x_velocity: Tensor, healthy: Tensor | None
    ) -> Tensor:
        assert healthy is not None
        return x_velocity + healthy.to(x_velocity.dtype) - self.ctrl_cost(action)


class Ant(Task):
    xml_file = "ant.xml"
    num_actuators = 8
    frame_skip = 5
    reset_noise_scale = 0.1
    ctrl_cost_weight = 0.5
    contact_cost_weight = 5e-4
    needs_contact_forces = True
    camera_distance = 5.0
    main_body = 1  # the torso

    def obs_dim(self, engine: Engine) -> int:
        model = engine.model
        return model.nq - 2 + model.nv + (model.nbody - 1) * 6

    def _contact_forces(self, engine: Engine) -> torch.Tensor:
        return engine.cfrc_ext.clamp(-1.0, 1.0)

    def observe(self, engine: Engine, out: torch.Tensor) -> None:
        nq, nv = engine.model.nq - 2, engine.model.nv
        out[:, :nq] = engine.qpos[:, 2:]
        out[:, nq : nq + nv] = engine.qvel
        out[:, nq + nv :] = self._contact_forces(engine)[:, 1:].flatten(1)

    def progress(self, engine: Engine) -> torch.Tensor:
        return engine.xpos[:, self.main_body, 0]

    def healthy(self, engine: Engine) -> torch.Tensor:
        finite = torch.isfinite(engine.qpos).all(1) & torch.isfinite(engine.qvel).all(1)
        z = engine.qpos[:, 2]
        return finite & (z >= 0.2) & (z <= 1.0)

    def reward(
        self, engine: Engine, action: Tensor, x_velocity: Tensor, healthy: Tensor | None
    ) -> Tensor:
        assert healthy is not None
        contact_cost = self.contact_cost_weight * self._contact_forces(engine).square().sum((1, 2))
        alive = healthy.to(x_velocity.dtype)
        return x_velocity + alive - self.ctrl_cost(action) - contact_cost.to(x_velocity.dtype)


TASKS: dict[str, type[Task]] = {"HalfCheetah": HalfCheetah, "Hopper": Hopper, "Ant": Ant}
