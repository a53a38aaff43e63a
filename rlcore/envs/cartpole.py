"""CartPole with the dynamics, reward, bounds and 500-step limit of Gymnasium `CartPole-v1`."""

from __future__ import annotations

import math

import gymnasium.spaces as spaces
import numpy as np
import torch

from rlcore.envs.base import StepSlot
from rlcore.envs.render import Canvas
from rlcore.envs.torch_env import ColumnStateEnv

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_CART + MASS_POLE
HALF_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
FORCE_MAG = 10.0
TAU = 0.02
X_THRESHOLD = 2.4
THETA_THRESHOLD = 12 * 2 * math.pi / 360
INIT_RANGE = 0.05


class CartPole(ColumnStateEnv):
    """Balance a pole on a cart; +1 reward per step, explicit Euler as in Gymnasium.

    Speed matters here (per-kernel overhead dominates at these sizes), so the state is stored
    structure-of-arrays with rows in observation order `[x, x_dot, theta, theta_dot]`, every
    intermediate has a preallocated buffer, and constants are 0-dim tensors (a Python scalar
    costs an extra wrapping per kernel on CPU).
    """

    observation_space = spaces.Box(low=-np.inf, high=np.inf, shape=(4,), dtype=np.float32)
    action_space = spaces.Discrete(2)
    max_episode_steps = 500
    state_dim = 4

    def __init__(self, num_envs: int, device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, device)
        n, dev = num_envs, self.device
        self._pos, self._vel = self._state[0::2], self._state[1::2]
        self._acc = torch.zeros(2, n, device=dev)
        self._x_acc, self._theta_acc = self._acc.unbind(0)
        self._buf = torch.zeros(5, n, device=dev)
        self._temp, self._cos, self._sin, self._num, self._den = self._buf.unbind(0)
        self._theta, self._theta_dot = self._state[2], self._state[3]
        self._abs_pos = torch.zeros(2, n, device=dev)
        self._x_out = torch.zeros(n, dtype=torch.bool, device=dev)

        def const(value: float) -> torch.Tensor:
            return torch.tensor(value, device=dev)

        self._force_by_action = torch.tensor([-FORCE_MAG, FORCE_MAG], device=dev) / TOTAL_MASS
        self._minus_gravity = const(-GRAVITY)
        self._ml_over_m = const(POLE_MASS_LENGTH / TOTAL_MASS)
        self._minus_ml_over_m = const(-POLE_MASS_LENGTH / TOTAL_MASS)
        self._den_scale = const(HALF_LENGTH * MASS_POLE / TOTAL_MASS)
        self._den_offset = const(-HALF_LENGTH * 4.0 / 3.0)
        self._tau = const(TAU)
        self._x_threshold = const(X_THRESHOLD)
        self._theta_threshold = const(THETA_THRESHOLD)
        self._init_scale = const(2 * INIT_RANGE)
        self._init_offset = const(-INIT_RANGE)
        self._one = const(1.0)

    def _advance(self, action: torch.Tensor, slot: StepSlot) -> None:
        theta, theta_dot, x_acc, theta_acc = (
            self._theta,
            self._theta_dot,
            self._x_acc,
            self._theta_acc,
        )
        temp, cos, sin, num, den = self._temp, self._cos, self._sin, self._num, self._den
        # temp = (force + ml * theta_dot^2 * sin) / M; force / M comes from a lookup table
        torch.index_select(self._force_by_action, 0, action.reshape(-1), out=temp)
        torch.cos(theta, out=cos)
        torch.sin(theta, out=sin)
        torch.mul(theta_dot, theta_dot, out=num)
        num.mul_(sin)
        temp.addcmul_(num, self._ml_over_m)
        # theta_acc = (g sin - cos temp) / (l (4/3 - m_p cos^2 / M)), both signs flipped
        torch.mul(cos, temp, out=num)
        num.addcmul_(sin, self._minus_gravity)
        torch.mul(cos, cos, out=den)
        den.mul_(self._den_scale).add_(self._den_offset)
        torch.div(num, den, out=theta_acc)
        # x_acc = temp - ml * theta_acc * cos / M
        torch.mul(theta_acc, cos, out=num)
        torch.addcmul(temp, num, self._minus_ml_over_m, out=x_acc)
        # Explicit Euler: positions move with the old velocities.
        self._pos.addcmul_(self._vel, self._tau)
        self._vel.addcmul_(self._acc, self._tau)
        torch.abs(self._pos, out=self._abs_pos)
        torch.gt(self._abs_pos[0], self._x_threshold, out=self._x_out)
        torch.gt(self._abs_pos[1], self._theta_threshold, out=slot.terminated)
        slot.terminated.logical_or_(self._x_out)
        slot.reward.copy_(self._one)

    def _sample_initial(self, out: torch.Tensor) -> None:
        torch.rand(out.shape, generator=self.generator, device=self.device, out=out)
        out.mul_(self._init_scale).add_(self._init_offset)

    def _observe(self, out: torch.Tensor) -> None:
        out.copy_(self._state.T)

    def _observe_ids(self, env_ids: torch.Tensor, out: torch.Tensor) -> None:
        out.index_copy_(0, env_ids, self._state.index_select(1, env_ids).T)

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        """Draw track, cart and pole with torch ops, on the env's device (no simulator)."""
        ids = self._all_ids if env_ids is None else env_ids.to(self.device, torch.long)
        x, theta = self._state[0, ids], self._state[2, ids]
        zeros = torch.zeros_like(x)
        canvas = Canvas(len(ids), size, (-X_THRESHOLD, X_THRESHOLD), (-1.6, 3.2), self.device)
        canvas.fill_rect(zeros, zeros - 0.16, 2 * X_THRESHOLD, 0.02, (0, 0, 0))
        canvas.fill_rect(x, zeros, 0.5, 0.3, (40, 40, 40))
        tip_x = x + 2 * HALF_LENGTH * torch.sin(theta)
        tip_y = 2 * HALF_LENGTH * torch.cos(theta)
        canvas.draw_segment(x, zeros, tip_x, tip_y, 0.1, (202, 152, 101))
        canvas.fill_circle(x, zeros, 0.05, (129, 132, 203))
        return canvas.image
