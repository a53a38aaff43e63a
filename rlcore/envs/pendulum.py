"""Pendulum swing-up with the dynamics, reward, bounds and 200-step limit of `Pendulum-v1`."""

from __future__ import annotations

import math

import gymnasium.spaces as spaces
import numpy as np
import torch

from rlcore.envs.base import StepSlot
from rlcore.envs.render import Canvas
from rlcore.envs.torch_env import ColumnStateEnv

GRAVITY = 10.0
MASS = 1.0
LENGTH = 1.0
DT = 0.05
MAX_SPEED = 8.0
MAX_TORQUE = 2.0
INIT_SPEED = 1.0


class Pendulum(ColumnStateEnv):
    """Swing a torque-driven pendulum upright and hold it there; never terminates.

    Same update as Gymnasium: the cost uses the pre-step state, the new angular velocity comes
    from the old angle and is clipped, then the angle moves with the new velocity. Gymnasium
    lets the angle grow without bound and normalises it only for the cost; here it is wrapped
    into [-pi, pi) after every step instead, which changes no observation or reward (both
    depend on the angle modulo 2 pi) but keeps float32 precise on long spinning episodes.
    """

    observation_space = spaces.Box(
        low=np.array([-1.0, -1.0, -MAX_SPEED], dtype=np.float32),
        high=np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32),
        dtype=np.float32,
    )
    action_space = spaces.Box(low=-MAX_TORQUE, high=MAX_TORQUE, shape=(1,), dtype=np.float32)
    max_episode_steps = 200
    state_dim = 2

    def __init__(self, num_envs: int, device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, device)
        n, dev = num_envs, self.device
        # rows: [theta, theta_dot]
        self._theta, self._theta_dot = self._state.unbind(0)
        self._torque = torch.zeros(n, device=dev)
        self._sin = torch.zeros(n, device=dev)

        def const(value: float) -> torch.Tensor:
            return torch.tensor(value, device=dev)

        self._zero = const(0.0)
        # theta_dot += (3 g / (2 l) sin(theta) + 3 / (m l^2) u) dt
        self._gravity_gain = const(3 * GRAVITY / (2 * LENGTH) * DT)
        self._torque_gain = const(3.0 / (MASS * LENGTH**2) * DT)
        self._dt = const(DT)
        self._pi = const(math.pi)
        self._two_pi = const(2 * math.pi)
        # Initial state U(-pi, pi) x U(-1, 1) as scale * U(0, 1) + offset, per row.
        self._init_scale = torch.tensor([[2 * math.pi], [2 * INIT_SPEED]], device=dev)
        self._init_offset = torch.tensor([[-math.pi], [-INIT_SPEED]], device=dev)

    def _advance(self, action: torch.Tensor, slot: StepSlot) -> None:
        theta, theta_dot, torque, sin = self._theta, self._theta_dot, self._torque, self._sin
        torch.clamp(action.reshape(-1), -MAX_TORQUE, MAX_TORQUE, out=torque)
        # reward = -(theta^2 + 0.1 theta_dot^2 + 0.001 u^2); theta is already in [-pi, pi).
        reward = slot.reward
        torch.addcmul(self._zero, theta, theta, value=-1.0, out=reward)
        reward.addcmul_(theta_dot, theta_dot, value=-0.1)
        reward.addcmul_(torque, torque, value=-0.001)
        torch.sin(theta, out=sin)
        theta_dot.addcmul_(sin, self._gravity_gain).addcmul_(torque, self._torque_gain)
        theta_dot.clamp_(-MAX_SPEED, MAX_SPEED)
        theta.addcmul_(theta_dot, self._dt)
        self._wrap(theta)
        slot.terminated.zero_()

    def _wrap(self, theta: torch.Tensor) -> None:
        """Map angles into [-pi, pi) in place, as Gymnasium's `angle_normalize`."""
        theta.add_(self._pi).remainder_(self._two_pi).sub_(self._pi)

    def _sample_initial(self, out: torch.Tensor) -> None:
        torch.rand(out.shape, generator=self.generator, device=self.device, out=out)
        out.mul_(self._init_scale).add_(self._init_offset)

    def _observe(self, out: torch.Tensor) -> None:
        # Column-wise writes: a transposed [3, N] -> [N, 3] copy is slower on CPU.
        torch.cos(self._theta, out=out[:, 0])
        torch.sin(self._theta, out=out[:, 1])
        out[:, 2].copy_(self._theta_dot)

    def _observe_ids(self, env_ids: torch.Tensor, out: torch.Tensor) -> None:
        theta, theta_dot = self._state.index_select(1, env_ids).unbind(0)
        out.index_copy_(0, env_ids, torch.stack((theta.cos(), theta.sin(), theta_dot), dim=1))

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        """Draw the rod from its pivot with torch ops, oriented as Gymnasium draws it."""
        ids = self._all_ids if env_ids is None else env_ids.to(self.device, torch.long)
        theta = self._theta[ids]
        zeros = torch.zeros_like(theta)
        # theta = 0 points up, positive theta turns counter-clockwise (as Gymnasium draws it).
        tip_x, tip_y = -LENGTH * torch.sin(theta), LENGTH * torch.cos(theta)
        rod, width = (204, 77, 77), 0.2
        canvas = Canvas(len(ids), size, (-2.2, 2.2), device=self.device)
        canvas.draw_segment(zeros, zeros, tip_x, tip_y, width, rod)
        canvas.fill_circle(tip_x, tip_y, width / 2, rod)
        canvas.fill_circle(zeros, zeros, 0.05, (0, 0, 0))
        return canvas.image
