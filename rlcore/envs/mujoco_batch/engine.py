"""Batched MuJoCo simulation engines: N copies of one MjModel whose state torch can view.

An `Engine` holds N simulations of one `mujoco.MjModel` and exposes their state as torch
tensors on its device *without copies* (views of the engine's own storage), so a task can
read observations and write controls with torch ops:

- `qpos` [N, nq], `qvel` [N, nv], `ctrl` [N, nu]: the state (writes take effect at the
  next call); `qpos_qvel` [N, nq + nv], both in one view where the engine stores them
  adjacent (None otherwise);
- `xpos` [N, nbody, 3], `cfrc_ext` [N, nbody, 6]: derived fields, refreshed by every call
  (after `step`, one substep behind the state, as with `mj_step`).

`arrays` holds the same views in the array type the engine's memory lives in, and `ops` the
in-place calls on that type (`rlcore.envs.mujoco_batch.ops`): numpy for `BatchEngine`, whose
state is host memory, so that a task's step between two engine steps costs the least; the
torch views themselves for `WarpEngine`.

Two implementations, chosen by the device (`make_engine`):

- `BatchEngine` (CPU): `mujoco.batch.Batch`, stepping all simulations in C on a thread
  pool; its state rows are float64 numpy arrays, viewed by torch;
- `WarpEngine` (CUDA, `rlcore.envs.mujoco_batch.warp_engine`): MuJoCo Warp, the same model
  batched on the GPU, its float32 arrays viewed by torch through DLPack.

`reset` restores the model's defaults (`mj_resetData`) without computing anything: the
caller writes its initial state, then calls `forward` on the same ids.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from rlcore.envs.mujoco_batch.ops import Array, ArrayOps, NumpyOps
from rlcore.errors import MissingExtraError

# Sensors that need `mj_rnePostConstraint`: the batch computes `cfrc_ext` only for models
# that have one, so an engine asked for contact forces adds one (it changes no dynamics).
_CONTACT_FORCE_SITE = "_rlcore_cfrc_site"


@dataclass(frozen=True)
class StateArrays:
    """An engine's state views in the array type of its `ops` (see the module docstring)."""

    qpos: Array
    qvel: Array
    ctrl: Array
    xpos: Array
    cfrc_ext: Array
    qpos_qvel: Array | None


class Engine(abc.ABC):
    """N simulations of one model on one device (see the module docstring)."""

    model: mujoco.MjModel
    num_envs: int
    device: torch.device
    qpos: torch.Tensor
    qvel: torch.Tensor
    ctrl: torch.Tensor
    xpos: torch.Tensor
    cfrc_ext: torch.Tensor
    qpos_qvel: torch.Tensor | None = None
    ops: ArrayOps
    # Whether the same seed, actions and state give bit-identical trajectories (the env
    # contract's guarantee); otherwise they agree to float32 round-off.
    bit_reproducible: bool = True
    arrays: StateArrays

    @abc.abstractmethod
    def step(self, nstep: int) -> None:
        """Advance every simulation by `nstep` calls of `mj_step`."""

    @abc.abstractmethod
    def reset(self, env_ids: torch.Tensor | None = None) -> None:
        """Restore the model's default state in `env_ids` (all by default); computes nothing."""

    @abc.abstractmethod
    def forward(self, env_ids: torch.Tensor | None = None) -> None:
        """Compute the derived fields of `env_ids` (all by default) at their current state."""

    @abc.abstractmethod
    def copy_state(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Make simulations `dst` exact copies of `src` (pairwise), derived fields included."""

    @abc.abstractmethod
    def state(self) -> torch.Tensor:
        """The whole integration state (`mjSTATE_INTEGRATION` rows), [N, nstate]; a view or
        a reused snapshot: clone it to keep it, restore it with `load_state`."""

    @abc.abstractmethod
    def load_state(self, state: torch.Tensor) -> None:
        """Set every simulation's integration state ([N, nstate]), then compute forward."""

    @property
    def dtype(self) -> torch.dtype:
        """The state's dtype (float64 in `BatchEngine`, float32 in `WarpEngine`)."""
        return self.qpos.dtype

    def _bind_arrays(self, ops: ArrayOps) -> None:
        """Set `ops` and `arrays`: the torch views as `ops`' kind of array (same memory)."""
        as_array, joint = ops.as_array, self.qpos_qvel
        self.ops = ops
        self.arrays = StateArrays(
            qpos=as_array(self.qpos),
            qvel=as_array(self.qvel),
            ctrl=as_array(self.ctrl),
            xpos=as_array(self.xpos),
            cfrc_ext=as_array(self.cfrc_ext),
            qpos_qvel=None if joint is None else as_array(joint),
        )


def with_contact_forces(model: mujoco.MjModel, spec: mujoco.MjSpec) -> mujoco.MjModel:
    """`spec` compiled with a force sensor on the first body, so that every step computes
    `cfrc_ext` (MuJoCo runs `mj_rnePostConstraint` only for models with such sensors)."""
    if any(model.sensor_type == mujoco.mjtSensor.mjSENS_FORCE):
        return model
    site = spec.body(model.body(1).name).add_site()
    site.name = _CONTACT_FORCE_SITE
    sensor = spec.add_sensor()
    sensor.type = mujoco.mjtSensor.mjSENS_FORCE
    sensor.objtype = mujoco.mjtObj.mjOBJ_SITE
    sensor.objname = _CONTACT_FORCE_SITE
    return spec.compile()


def _writable_view(array: np.ndarray) -> torch.Tensor:
    """A torch view of a batch output (read-only numpy flags; torch would warn)."""
    view = array.view()
    view.flags.writeable = True
    return torch.from_numpy(view)


class BatchEngine(Engine):
    """`mujoco.batch.Batch` on CPU threads; results bit-identical at any thread count."""

    def __init__(
        self, model: mujoco.MjModel, num_envs: int, nthread: int = 0, ops: ArrayOps | None = None
    ) -> None:
        """`ops`: the kind of arrays tasks compute on; numpy by default (the fastest here),
        `TorchOps()` for the torch views (tests compare the two)."""
        from mujoco.batch import Batch

        self.model = model
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.batch = Batch(model, num_envs, nthread=nthread)
        self._state = torch.from_numpy(self.batch.state)
        self.qpos = torch.from_numpy(self.batch.bind("qpos"))
        self.qvel = torch.from_numpy(self.batch.bind("qvel"))
        self.ctrl = torch.from_numpy(self.batch.bind("ctrl"))
        self.xpos = _writable_view(self.batch.bind("xpos"))
        self.cfrc_ext = _writable_view(self.batch.bind("cfrc_ext"))
        # A state row holds qpos then qvel, after the time (mjSTATE_INTEGRATION's order).
        start = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_TIME)
        joint = self._state[:, start : start + model.nq + model.nv]
        if (
            joint[:, : model.nq].data_ptr() == self.qpos.data_ptr()
            and joint[:, model.nq :].data_ptr() == self.qvel.data_ptr()
        ):
            self.qpos_qvel = joint
        self._bind_arrays(NumpyOps() if ops is None else ops)

    def step(self, nstep: int) -> None:
        """Step every simulation in C on the batch's thread pool."""
        self.batch.step(nstep=nstep)

    def reset(self, env_ids: torch.Tensor | None = None) -> None:
        """`mj_resetData` on the chosen rows of the batch, stopping before any computation."""
        self.batch.reset(_host_ids(env_ids), stage=mujoco.mjtStage.mjSTAGE_NONE)

    def forward(self, env_ids: torch.Tensor | None = None) -> None:
        """`mj_forward` on the chosen rows of the batch (all by default)."""
        self.batch.forward(_host_ids(env_ids))

    def copy_state(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy state rows `src` over `dst`, then recompute the derived fields of `dst`."""
        self._state[dst] = self._state[src]
        self.forward(dst)

    def state(self) -> torch.Tensor:
        """The batch's own state rows, float64 (a live view: clone it to keep it)."""
        return self._state

    def load_state(self, state: torch.Tensor) -> None:
        """Copy `state` into the batch's rows, then compute every simulation forward."""
        self._state.copy_(state)
        self.forward()


def _host_ids(env_ids: torch.Tensor | None) -> np.ndarray | None:
    return None if env_ids is None else env_ids.to("cpu", torch.int64).numpy()


ENGINES = ("auto", "batch", "warp")


def make_engine(
    model: mujoco.MjModel,
    num_envs: int,
    device: torch.device,
    nthread: int = 0,
    kind: str = "auto",
    deterministic: bool = False,
) -> Engine:
    """The engine `kind`; "auto" picks by device: `BatchEngine` on CPU, `WarpEngine` on CUDA
    ("warp" on CPU runs MuJoCo Warp on Warp's CPU device: for tests). `deterministic`:
    Warp's `DeterminismType.ALL` (the batch engine is bit-reproducible anyway)."""
    if kind not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {kind!r}")
    if kind == "auto":
        kind = "batch" if device.type == "cpu" else "warp"
    if kind == "batch":
        if device.type != "cpu":
            raise ValueError(f"the mujoco.batch engine runs on CPU, not {device}")
        return BatchEngine(model, num_envs, nthread=nthread)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"no MuJoCo engine for device {device} (use cpu or cuda)")
    try:
        from rlcore.envs.mujoco_batch.warp_engine import WarpEngine
    except ImportError as exc:
        raise MissingExtraError(
            f"MuJoCo on {device.type} through Warp needs MuJoCo Warp ({exc.name or exc}): "
            "pip install 'rlplatform[mujoco-warp]'"
        ) from exc
    return WarpEngine(model, num_envs, device, deterministic=deterministic)


__all__ = ["ENGINES", "BatchEngine", "Engine", "StateArrays", "make_engine", "with_contact_forces"]
