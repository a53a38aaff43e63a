"""`MujocoEnv`: a locomotion task on a batched MuJoCo engine, behind the env contract.

The engine steps all N simulations at once (C threads on CPU, MuJoCo Warp on CUDA); the
task turns its state into observations, rewards and terminations written straight into the
rollout slot, with numpy calls on CPU (on views of the same memory: no copies) and torch ops
on CUDA (`ops.py`). `TorchEnv` supplies the episode clock, truncation, `done`,
`final_obs` (read before the auto-reset, so truncation bootstraps from the true final
observation) and masked auto-reset of the finished instances only.

Resets follow Gymnasium: the model's defaults, `qpos0 + noise` and `0 + noise` written into
the state, then `mj_forward`. A group reset (GRPO) samples one state per group and copies
that simulation's whole integration state to the rest of its group, so a group's members
are bit-identical and stay so under identical actions.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import gymnasium.spaces as spaces
import mujoco
import numpy as np
import torch

from rlcore.envs.base import StepSlot
from rlcore.envs.mujoco_batch.engine import Engine, make_engine, with_contact_forces
from rlcore.envs.mujoco_batch.ops import NumpyOps
from rlcore.envs.mujoco_batch.tasks import TASKS, Task, gymnasium_asset
from rlcore.envs.mujoco_gl import renderer_unavailable_errors, rendering_unavailable
from rlcore.envs.torch_env import TorchEnv
from rlcore.errors import ConfigError
from rlcore.observations import FLAT_KEY


class MujocoEnvError(ConfigError):
    """A MuJoCo task or model that cannot be built (the message names the task or file)."""


def load_model(task_name: str, task: Task, xml_file: str | None) -> mujoco.MjModel:
    """Compile the task's MJCF (Gymnasium's by default), checking what the task needs."""
    path = xml_file or gymnasium_asset(task.xml_file)
    if not os.path.isfile(path):
        raise MujocoEnvError(f"mujoco:{task_name}: MJCF file not found: {path}")
    try:
        spec = mujoco.MjSpec.from_file(path)
        with warnings.catch_warnings():  # Gymnasium's half_cheetah.xml uses settotalmass
            warnings.filterwarnings("ignore", "compiler attribute 'settotalmass'")
            model = spec.compile()
        if task.needs_contact_forces:
            model = with_contact_forces(model, spec)
    except ValueError as exc:  # MuJoCo's parse and compile errors
        raise MujocoEnvError(f"mujoco:{task_name}: cannot compile {path}: {exc}") from None
    if model.nu != task.num_actuators:
        raise MujocoEnvError(
            f"mujoco:{task_name}: {path} has {model.nu} actuators; "
            f"the task expects {task.num_actuators}"
        )
    return model


class MujocoEnv(TorchEnv):
    """N instances of a MuJoCo locomotion task (`HalfCheetah`, `Hopper`, `Ant`) on `device`.

    `nthread`: CPU threads of the batch (0: all CPUs; results do not depend on it).
    `xml_file`: another MJCF with the same actuators (default: Gymnasium's).
    `engine`: "auto" (mujoco.batch on CPU, MuJoCo Warp on CUDA), "batch" or "warp".
    `deterministic`: MuJoCo Warp's `DeterminismType.ALL` (slower). What is guaranteed, by
    `bit_reproducible`: seeded resets, state round trips and reruns give bit-identical
    trajectories with mujoco.batch (CPU) and with Warp on its CPU device; Warp on CUDA, with
    `deterministic` or not, agrees to float32 round-off (contact order follows atomics), which
    contacts amplify over steps.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        nthread: int = 0,
        xml_file: str | None = None,
        engine: str = "auto",
        deterministic: bool = False,
    ) -> None:
        if task not in TASKS:
            raise MujocoEnvError(f"unknown MuJoCo task {task!r}; choose one of {sorted(TASKS)}")
        if num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
        self.name = f"mujoco:{task}"
        self.task = TASKS[task]()
        model = load_model(task, self.task, xml_file)
        self.engine: Engine = make_engine(
            model, num_envs, torch.device(device), nthread, engine, deterministic
        )
        self.bit_reproducible = self.engine.bit_reproducible
        self.task.bind(self.engine)
        self.max_episode_steps = self.task.max_episode_steps
        obs_dim = self.task.obs_dim()
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32)
        low, high = model.actuator_ctrlrange.T.astype(np.float32)
        self.action_space = spaces.Box(low, high, dtype=np.float32)
        super().__init__(num_envs, device)
        self.dt = self.task.dt
        like = {"dtype": self.engine.dtype, "device": self.device}
        self._qpos0 = torch.as_tensor(model.qpos0, **like)
        # The step's arrays, in the engine's kind (`ops.as_array`: numpy views on CPU).
        self._ops = ops = self.engine.ops
        self._numpy_slots = isinstance(ops, NumpyOps)
        self.steps_on_host = self._numpy_slots
        self._low = ops.as_array(torch.as_tensor(low, device=self.device))
        self._high = ops.as_array(torch.as_tensor(high, device=self.device))
        self._x_now = self.task.progress()  # a view of the engine's state
        self._x_now_t = torch.as_tensor(self._x_now)
        self._x_prev = torch.zeros(num_envs, **like)
        self._x_prev_arr = ops.as_array(self._x_prev)
        self._progress = ops.as_array(torch.zeros(num_envs, **like))
        self._reward = ops.as_array(torch.zeros(num_envs, **like))
        self._action_shape = (num_envs, self.action_dim)
        self._slot_obs: tuple[torch.Tensor | None, Any] = (None, None)
        self._renderer: mujoco.Renderer | None = None
        self._reset_ids(self._all_ids, 1)

    # --- TorchEnv hooks ----------------------------------------------------------------

    def _advance(self, action: torch.Tensor, slot: StepSlot) -> None:
        if action.shape != self._action_shape:
            raise ValueError(
                f"{self.name}: actions must have shape {list(self._action_shape)}, "
                f"got {list(action.shape)}"
            )
        engine, task, ops = self.engine, self.task, self._ops
        if self._numpy_slots:  # numpy views of the slot, made once per slot
            act = slot.host_action if action is slot.action else ops.as_array(action.cpu())
            views = slot.host_views
            next_obs, reward, terminated = views.next_obs, views.reward, views.terminated
            self._slot_obs = (slot.next_obs[FLAT_KEY], next_obs)  # for `_observe`, right after
        else:
            act, reward, terminated = action, slot.reward, slot.terminated
        ops.clamp(act, self._low, self._high, out=engine.arrays.ctrl)
        engine.step(task.frame_skip)
        # Few calls from here on: each costs microseconds after the step (ops.py).
        ops.sub(self._x_now, self._x_prev_arr, out=self._progress)
        ops.copy(self._x_prev_arr, self._x_now)
        healthy = task.healthy()
        task.reward(self._progress, healthy, self._reward)
        ops.copy(reward, self._reward)
        if healthy is None:
            ops.fill(terminated, False)
        else:
            ops.logical_not(healthy, out=terminated)

    def _reset_ids(self, env_ids: torch.Tensor, group_size: int) -> None:
        engine, ids = self.engine, env_ids.to(self.device, torch.long)
        leaders = ids.view(-1, group_size)[:, 0] if group_size > 1 else ids
        engine.reset(leaders)
        model = engine.model
        dq, dv = self.task.noise(leaders.numel(), model.nq, model.nv, self.generator, self.device)
        engine.qpos[leaders] = (self._qpos0 + dq).to(engine.dtype)
        engine.qvel[leaders] = dv.to(engine.dtype)
        engine.forward(leaders)
        if group_size > 1:
            followers = ids.view(-1, group_size)[:, 1:]
            engine.copy_state(leaders.repeat_interleave(group_size - 1), followers.reshape(-1))
        self._x_prev[ids] = self._x_now_t[ids]

    def _reset_where(self, mask: torch.Tensor) -> None:
        ids = mask.nonzero().squeeze(1)  # a host sync; the engines reset by index
        if ids.numel() > 0:
            self._reset_ids(ids, 1)

    def _observe(self, out: torch.Tensor) -> None:
        slot_obs, array = self._slot_obs
        self.task.observe(array if out is slot_obs else self._ops.as_array(out))

    def _physics_state(self) -> dict[str, torch.Tensor]:
        return {"state": self.engine.state(), "x_prev": self._x_prev}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore the simulations and clocks; derived fields are recomputed from the state."""
        self.engine.load_state(state["physics.state"])
        self._x_prev.copy_(state["physics.x_prev"])
        self.elapsed_steps.copy_(state["elapsed_steps"])
        self.generator.set_state(state["generator"])

    # --- video -------------------------------------------------------------------------

    def render(self, env_ids: torch.Tensor | None = None, size: int = 128) -> torch.Tensor:
        """Frames from `mujoco.Renderer` offscreen (EGL or OSMesa where there is no display),
        a camera tracking the torso; shadows and reflections off (software GL is several
        times slower with them)."""
        model = self.engine.model
        ids = range(self.num_envs) if env_ids is None else env_ids.tolist()
        renderer = self._renderer_of(size)
        data = mujoco.MjData(model)
        camera = mujoco.MjvCamera()
        camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        camera.trackbodyid = 1
        camera.distance = self.task.camera_distance
        camera.elevation = -20.0
        qpos = self.engine.qpos.detach().to("cpu", torch.float64).numpy()
        qvel = self.engine.qvel.detach().to("cpu", torch.float64).numpy()
        frames = []
        for i in ids:
            data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera)
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
            frames.append(torch.from_numpy(renderer.render().copy()))
        return torch.stack(frames).to(self.device)

    def _renderer_of(self, size: int) -> mujoco.Renderer:
        unavailable = rendering_unavailable()
        if unavailable is not None:
            raise MujocoEnvError(f"{self.name} cannot render: {unavailable}")
        if self._renderer is None or self._renderer.height != size:
            if self._renderer is not None:
                self._renderer.close()
            model = self.engine.model
            model.vis.global_.offwidth = max(model.vis.global_.offwidth, size)
            model.vis.global_.offheight = max(model.vis.global_.offheight, size)
            try:
                self._renderer = mujoco.Renderer(model, size, size)
            except renderer_unavailable_errors() as exc:  # no OpenGL platform here
                raise MujocoEnvError(
                    f"{self.name} cannot render: {exc} (offscreen rendering needs EGL or OSMesa:"
                    " set MUJOCO_GL=egl or MUJOCO_GL=osmesa before importing mujoco)"
                ) from exc
        return self._renderer

    def close(self) -> None:
        """Free the offscreen renderer (its GL context), if one was made; idempotent."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
