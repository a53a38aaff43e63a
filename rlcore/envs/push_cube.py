"""Planar pushing: a point-mass pusher shoves a cube across a table to a goal."""

from __future__ import annotations

import math

import gymnasium.spaces as spaces
import numpy as np
import torch

from rlcore.envs.base import StepSlot
from rlcore.envs.render import Canvas
from rlcore.envs.torch_env import ColumnStateEnv

TABLE_HALF = 0.5
PUSHER_RADIUS = 0.02
CUBE_RADIUS = 0.025
CONTACT_DIST = PUSHER_RADIUS + CUBE_RADIUS
DT = 0.05
MAX_SPEED = 0.5
PUSHER_MASS = 0.5
MAX_FORCE = 2.5
DAMPING = 5.0
CUBE_INIT = 0.3
GOAL_DIST = (0.2, 0.4)
SUCCESS_DIST = 0.05
SUCCESS_BONUS = 1.0
GOAL_WEIGHT = 2.0
# Centres stay where the whole disc is on the table; goals where the cube can reach them.
PUSHER_LIMIT = TABLE_HALF - PUSHER_RADIUS
CUBE_LIMIT = TABLE_HALF - CUBE_RADIUS
EPS = 1e-8
CONTROLS = ("velocity", "force")


class PushCube(ColumnStateEnv):
    """Push a cube (a disc for contact) to a goal with a point-mass pusher on a square table.

    Contact is quasi-static: the cube never slides on its own; when the moved pusher overlaps
    it, the cube is pushed out along the contact normal by the penetration. If the table edge
    then holds the cube back, the pusher is pushed out of the cube instead, so it can never
    tunnel through. The pusher velocity in the state is its actual displacement over the
    step (an inelastic stop at the edge or the cube), so under force control a blocked pusher
    does not build up speed.

    Reward per step is `-(|pusher - push_point| + 2 |cube - goal|)` in metres, where
    `push_point` is the contact position behind the cube on the goal-cube line, plus 1 on the
    step the cube comes within 5 cm of the goal, which succeeds and terminates the episode.

    State rows are stored in observation order `[pusher(2), pusher_vel(2), cube(2), goal(2)]`
    so that most of the observation is one copy.
    """

    observation_space = spaces.Box(low=-np.inf, high=np.inf, shape=(12,), dtype=np.float32)
    action_space = spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)
    max_episode_steps = 100
    state_dim = 8
    has_success = True

    def __init__(
        self, num_envs: int, device: torch.device | str = "cpu", control: str = "velocity"
    ) -> None:
        if control not in CONTROLS:
            raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
        super().__init__(num_envs, device)
        self.control = control
        n, dev = num_envs, self.device
        self._pusher, self._vel = self._state[0:2], self._state[2:4]
        self._cube, self._goal = self._state[4:6], self._state[6:8]
        # [[pusher], [cube]] and [[cube], [goal]]: both differences of the observation at once
        self._diff_from = self._state.view(2, 4, n)[:, 0:2]
        self._diff_to = self._state[4:8].view(2, 2, n)
        self._diffs = torch.zeros(4, n, device=dev)
        self._prev = torch.zeros(2, n, device=dev)
        self._push = torch.zeros(2, n, device=dev)
        self._offset = torch.zeros(2, n, device=dev)
        self._buf = torch.zeros(3, n, device=dev)
        self._dist, self._factor, self._goal_dist = self._buf.unbind(0)

        def const(value: float) -> torch.Tensor:
            return torch.tensor(value, device=dev)

        self._speed_dt = const(MAX_SPEED * DT)
        self._decay = const(1.0 - DAMPING * DT / PUSHER_MASS)
        self._force_gain = const(MAX_FORCE * DT / PUSHER_MASS)
        self._dt = const(DT)
        self._inv_dt = const(1.0 / DT)
        self._contact = const(CONTACT_DIST)
        self._minus_contact = const(-CONTACT_DIST)
        self._success_dist = const(SUCCESS_DIST)
        self._minus_goal_weight = const(-GOAL_WEIGHT)
        self._bonus = const(SUCCESS_BONUS)

    # --- physics -----------------------------------------------------------------------

    def _advance(self, action: torch.Tensor, slot: StepSlot) -> None:
        pusher, vel, cube, prev = self._pusher, self._vel, self._cube, self._prev
        prev.copy_(pusher)
        if self.control == "velocity":
            torch.clamp(action.T, -1.0, 1.0, out=vel)
            pusher.addcmul_(vel, self._speed_dt)
        else:
            push = self._push
            torch.clamp(action.T, -1.0, 1.0, out=push)
            # Semi-implicit Euler of m dv/dt = F - b v.
            vel.mul_(self._decay).addcmul_(push, self._force_gain)
            pusher.addcmul_(vel, self._dt)
        pusher.clamp_(-PUSHER_LIMIT, PUSHER_LIMIT)
        # The cube yields first; whatever overlap the table edge leaves, the pusher gives up.
        self._separate(cube, pusher, self._contact)
        cube.clamp_(-CUBE_LIMIT, CUBE_LIMIT)
        self._separate(pusher, cube, self._contact)
        pusher.clamp_(-PUSHER_LIMIT, PUSHER_LIMIT)
        torch.sub(pusher, prev, out=vel).mul_(self._inv_dt)
        self._score(slot)

    def _separate(self, mover: torch.Tensor, anchor: torch.Tensor, contact: torch.Tensor) -> None:
        """Move `mover` ([2, N]) away from `anchor` until the two discs no longer overlap."""
        offset, dist, factor = self._offset, self._dist, self._factor
        torch.sub(mover, anchor, out=offset)
        torch.hypot(offset[0], offset[1], out=dist)
        # factor = max(contact - dist, 0) / dist: the penetration per unit of offset
        torch.sub(contact, dist, out=factor).relu_()
        factor.div_(dist.clamp_min_(EPS))
        mover.addcmul_(offset, factor)

    def _score(self, slot: StepSlot) -> None:
        """Write reward, success and termination for the current (post-step) state."""
        to_goal, to_push, dist, goal_dist = self._offset, self._push, self._dist, self._goal_dist
        torch.sub(self._goal, self._cube, out=to_goal)
        torch.hypot(to_goal[0], to_goal[1], out=goal_dist)
        torch.lt(goal_dist, self._success_dist, out=slot.terminated)
        if slot.success is not None:
            slot.success.copy_(slot.terminated)
        # push_point - pusher = cube - pusher - unit(goal - cube) * contact distance
        to_goal.div_(torch.clamp_min(goal_dist, EPS, out=dist))
        torch.sub(self._cube, self._pusher, out=to_push)
        to_push.addcmul_(to_goal, self._minus_contact)
        torch.hypot(to_push[0], to_push[1], out=dist)
        torch.mul(goal_dist, self._minus_goal_weight, out=slot.reward)
        slot.reward.sub_(dist)
        slot.reward.addcmul_(slot.terminated, self._bonus)

    # --- resets ------------------------------------------------------------------------

    def _sample_initial(self, out: torch.Tensor) -> None:
        """Write fresh states into `out` ([8, n], state row order)."""
        n, dev = out.shape[1], self.device
        u = torch.rand(6, n, generator=self.generator, device=dev)
        pusher, vel, cube, goal = out[0:2], out[2:4], out[4:6], out[6:8]
        torch.mul(u[0:2], 2 * CUBE_INIT, out=cube).sub_(CUBE_INIT)
        # Goal: a uniform direction at distance U(0.2, 0.4). A coordinate that leaves the
        # table is mirrored about the cube; with |cube|, distance < CUBE_LIMIT the mirrored
        # one is always inside, so the distance is kept exactly.
        dist = u[2] * (GOAL_DIST[1] - GOAL_DIST[0]) + GOAL_DIST[0]
        angle = u[3] * (2 * math.pi)
        offset = torch.stack((angle.cos(), angle.sin())) * dist
        outside = (cube + offset).abs() > CUBE_LIMIT
        torch.add(cube, torch.where(outside, -offset, offset), out=goal)
        # Pusher: uniform on the table; a start inside the contact distance of the cube is
        # moved radially outwards by that distance, so it starts clear of the cube.
        torch.mul(u[4:6], 2 * PUSHER_LIMIT, out=pusher).sub_(PUSHER_LIMIT)
        rel = pusher - cube
        gap = torch.hypot(rel[0], rel[1])
        scale = torch.where(gap < CONTACT_DIST, (gap + CONTACT_DIST) / gap.clamp_min(EPS), 1.0)
        torch.addcmul(cube, rel, scale, out=pusher)
        vel.zero_()

    # --- observation, state, rendering -------------------------------------------------

    def _observe(self, out: torch.Tensor) -> None:
        # Subtracting straight into the strided columns of `out` is several times slower on
        # CPU than a contiguous difference followed by a transposed copy.
        out[:, 0:8].copy_(self._state.T)
        torch.sub(self._diff_to, self._diff_from, out=self._diffs.view(2, 2, -1))
        out[:, 8:12].copy_(self._diffs.T)

    def _observe_ids(self, env_ids: torch.Tensor, out: torch.Tensor) -> None:
        rows = self._state.index_select(1, env_ids)
        diffs = rows[4:8] - torch.cat((rows[0:2], rows[4:6]))
        out.index_copy_(0, env_ids, torch.cat((rows, diffs)).T)

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        """Draw the table from above (goal, cube, pusher) with torch ops."""
        ids = self._all_ids if env_ids is None else env_ids.to(self.device, torch.long)
        state = self._state[:, ids]
        zeros = torch.zeros(len(ids), device=self.device)
        table = 2 * TABLE_HALF
        canvas = Canvas(len(ids), size, (-0.55, 0.55), device=self.device)
        canvas.fill_rect(zeros, zeros, table + 0.02, table + 0.02, (90, 90, 90))
        canvas.fill_rect(zeros, zeros, table, table, (225, 225, 225))
        canvas.fill_circle(state[6], state[7], SUCCESS_DIST, (150, 215, 150))
        canvas.fill_circle(state[6], state[7], 0.008, (30, 120, 30))
        canvas.fill_rect(state[4], state[5], 2 * CUBE_RADIUS, 2 * CUBE_RADIUS, (205, 120, 45))
        canvas.fill_circle(state[0], state[1], PUSHER_RADIUS, (50, 80, 200))
        return canvas.image
