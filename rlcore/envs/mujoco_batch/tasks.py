"""Locomotion tasks over an `Engine`: Gymnasium's `-v5` HalfCheetah, Hopper and Ant.

Each task reads the engine's state views and writes observations, rewards and terminations
straight into the rollout, reproducing Gymnasium's `-v5` definitions with their default
arguments (observations, reward terms and weights, health checks, reset noise, frame skip,
time limit), on the MJCF files that ship with Gymnasium. The forward reward is the progress
of `progress()` over the step divided by `dt = timestep * frame_skip`, as in Gymnasium.

A task is bound to one engine (`bind`) and computes on `engine.arrays` with `engine.ops`:
numpy on the CPU engine, torch on MuJoCo Warp, one code for both (`ops.py` says why and
what the two share). A step makes as few calls as it can, each costing microseconds between
engine steps: the observation of a planar task is one copy from the engine's contiguous
`qpos_qvel` rows where it has them; the reward takes three calls in the engine's dtype and
one copy into the rollout.

One known difference: Ant's contact forces (`cfrc_ext`, in its observation and contact
cost), because Ant's MJCF integrates with RK4. Gymnasium calls `mj_rnePostConstraint` after
`mj_step`, so its forces come from the derived fields of the last substep's fourth RK4
stage, an intermediate state; a batched engine computes them inside the step (a force sensor
makes MuJoCo do so), at the last substep's start, the first stage. Reproducing Gymnasium's
would take a copy of every simulation's whole MjData after each step, a cost on every step
out of all proportion to one observation term. With the Euler integrator both sample the
same state, and observations and rewards match Gymnasium's exactly, contact forces included;
under RK4, positions, velocities, the other reward terms and terminations match
(tests/rlcore/envs/test_mujoco_batch.py).
"""

from __future__ import annotations

import abc
import os
from typing import ClassVar

import torch

from rlcore.envs.mujoco_batch.engine import Engine, StateArrays
from rlcore.envs.mujoco_batch.ops import Array, ArrayOps


def gymnasium_asset(xml_file: str) -> str:
    """Path of an MJCF file shipped with Gymnasium (`gymnasium[mujoco]`)."""
    import gymnasium

    return os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", xml_file)


class Task(abc.ABC):
    """What a locomotion task computes from an engine's state (see module docstring)."""

    xml_file: ClassVar[str]
    frame_skip: ClassVar[int]
    max_episode_steps: ClassVar[int] = 1000
    num_actuators: ClassVar[int]
    reset_noise_scale: ClassVar[float]
    # qpos noise is uniform in +-scale; qvel noise is `scale * N(0, 1)` or the same uniform
    qvel_noise: ClassVar[str] = "normal"
    ctrl_cost_weight: ClassVar[float]
    healthy_reward: ClassVar[float] = 0.0
    needs_contact_forces: ClassVar[bool] = False
    camera_distance: ClassVar[float] = 4.0

    engine: Engine
    arrays: StateArrays
    ops: ArrayOps
    dt: float

    def bind(self, engine: Engine) -> None:
        """Attach to `engine`: its state views (stable for its lifetime) and constants."""
        self.engine, self.arrays, self.ops = engine, engine.arrays, engine.ops
        self.dt = engine.model.opt.timestep * self.frame_skip
        n, like = engine.num_envs, {"dtype": engine.dtype, "device": engine.device}
        self._ctrl_cost = self.ops.as_array(torch.zeros(n, **like))

    @abc.abstractmethod
    def obs_dim(self) -> int:
        """Width of one observation."""

    @abc.abstractmethod
    def observe(self, out: Array) -> None:
        """Write every instance's observation into `out` ([N, obs_dim] float32)."""

    def progress(self) -> Array:
        """The coordinate whose rate of change is rewarded ([N], a view): the root's x."""
        return self.arrays.qpos[:, 0]

    def healthy(self) -> Array | None:
        """Where each instance is healthy ([N] bool), or None for a task that never ends."""
        return None

    def reward(self, progress: Array, healthy: Array | None, out: Array) -> None:
        """Write the step's reward into `out` ([N], the engine's dtype; mixed-dtype calls
        cost more): `progress` (the change of `progress()` over the step) / dt, minus the
        control cost on the applied controls, plus `healthy_reward` where healthy
        (`healthy` is `healthy()`'s)."""
        ops = self.ops
        ops.div(progress, self.dt, out=out)
        ops.sum_squares(self.arrays.ctrl, out=self._ctrl_cost)
        ops.add_scaled(out, self._ctrl_cost, -self.ctrl_cost_weight)
        if healthy is not None and self.healthy_reward:
            ops.add_scaled(out, healthy, self.healthy_reward)

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


class PlanarTask(Task):
    """A planar walker observed as `qpos[1:]` (all but the root's x) and `qvel`, clipped to
    +-`qvel_clip` where the task says so."""

    qvel_clip: ClassVar[float | None] = None

    def bind(self, engine: Engine) -> None:
        """Attach as `Task.bind` does, and find the one-copy observation rows if any."""
        super().bind(engine)
        # Without a clip, qpos[1:] and qvel in one copy where the engine holds them adjacent.
        joint = self.arrays.qpos_qvel
        self._obs_rows = joint[:, 1:] if joint is not None and self.qvel_clip is None else None
        self._qpos_obs = self.arrays.qpos[:, 1:]

    def obs_dim(self) -> int:
        """`qpos` without the root's x, then `qvel`."""
        return self.engine.model.nq - 1 + self.engine.model.nv

    def observe(self, out: Array) -> None:
        """One copy of the adjacent `qpos_qvel` rows where the engine has them and no clip
        applies; otherwise `qpos[1:]` and the (clipped) `qvel` apart."""
        if self._obs_rows is not None:
            self.ops.copy(out, self._obs_rows)
            return
        nq = self.engine.model.nq - 1
        out[:, :nq] = self._qpos_obs
        qvel, clip = self.arrays.qvel, self.qvel_clip
        out[:, nq:] = qvel if clip is None else qvel.clip(-clip, clip)


class HalfCheetah(PlanarTask):
    """Gymnasium's HalfCheetah-v5: run forward; never terminates, only the time limit ends it."""

    xml_file = "half_cheetah.xml"
    num_actuators = 6
    frame_skip = 5
    reset_noise_scale = 0.1
    ctrl_cost_weight = 0.1
    camera_distance = 4.0


class Hopper(PlanarTask):
    """Gymnasium's Hopper-v5: hop forward; the episode ends when the hopper falls."""

    xml_file = "hopper.xml"
    num_actuators = 3
    frame_skip = 4
    reset_noise_scale = 5e-3
    qvel_noise = "uniform"
    ctrl_cost_weight = 1e-3
    healthy_reward = 1.0
    qvel_clip = 10.0
    camera_distance = 4.0

    def healthy(self) -> Array:
        """Gymnasium's health check: bounded state, torso high enough and near upright."""
        qpos, qvel = self.arrays.qpos, self.arrays.qvel
        state_ok = (abs(qpos[:, 2:]) < 100.0).all(1) & (abs(qvel) < 100.0).all(1)
        z, angle = qpos[:, 1], qpos[:, 2]
        return state_ok & (z > 0.7) & (angle > -0.2) & (angle < 0.2)


class Ant(Task):
    """Gymnasium's Ant-v5: walk forward in 3D; ends when the torso leaves its height band.

    Its contact forces differ from Gymnasium's under RK4 (see the module docstring).
    """

    xml_file = "ant.xml"
    num_actuators = 8
    frame_skip = 5
    reset_noise_scale = 0.1
    ctrl_cost_weight = 0.5
    healthy_reward = 1.0
    contact_cost_weight = 5e-4
    needs_contact_forces = True
    camera_distance = 5.0
    main_body = 1  # the torso

    def obs_dim(self) -> int:
        """`qpos` without the root's x and y, `qvel`, then the clipped contact forces of
        every body but the world."""
        model = self.engine.model
        return model.nq - 2 + model.nv + (model.nbody - 1) * 6

    def _contact_forces(self) -> Array:
        return self.arrays.cfrc_ext.clip(-1.0, 1.0)

    def observe(self, out: Array) -> None:
        """Write the entries `obs_dim` lists, in that order."""
        arrays, model = self.arrays, self.engine.model
        nq, nv = model.nq - 2, model.nv
        out[:, :nq] = arrays.qpos[:, 2:]
        out[:, nq : nq + nv] = arrays.qvel
        out[:, nq + nv :] = self._contact_forces()[:, 1:].reshape(self.engine.num_envs, -1)

    def progress(self) -> Array:
        """The torso's x, read from `xpos` of its body as Gymnasium's Ant reads it."""
        return self.arrays.xpos[:, self.main_body, 0]

    def healthy(self) -> Array:
        """Gymnasium's health check: a finite state and the torso's z within [0.2, 1.0]."""
        qpos, qvel, ops = self.arrays.qpos, self.arrays.qvel, self.ops
        finite = ops.isfinite(qpos).all(1) & ops.isfinite(qvel).all(1)
        z = qpos[:, 2]
        return finite & (z >= 0.2) & (z <= 1.0)

    def reward(self, progress: Array, healthy: Array | None, out: Array) -> None:
        """`Task.reward`'s terms minus the cost of the clipped contact forces."""
        super().reward(progress, healthy, out)
        forces = self._contact_forces()
        contact_cost = (forces * forces).sum((1, 2))
        self.ops.add_scaled(out, contact_cost, -self.contact_cost_weight)


TASKS: dict[str, type[Task]] = {"HalfCheetah": HalfCheetah, "Hopper": Hopper, "Ant": Ant}
