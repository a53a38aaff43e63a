"""`WarpEngine`: the `Engine` interface over MuJoCo Warp (`mujoco_warp`), for CUDA devices.

MuJoCo Warp keeps N worlds of one model in structure-of-arrays Warp arrays (float32) with a
leading world axis, so `wp.to_torch` gives torch views of them with no copy: writes to
`qpos`/`qvel`/`ctrl` take effect at the next call, and `xpos`/`cfrc_ext` are refreshed by
every `step`/`forward`, as with `BatchEngine`.

How it maps onto `mujoco_warp` (4.0):

- `step(nstep)`: `nstep` calls of `mujoco_warp.step`; on CUDA (with conditional graph nodes,
  CUDA >= 12.4, which the solver's early exit needs) the loop is captured once per `nstep`
  into a CUDA graph and replayed. Graphs keep array addresses, which never change here.
- `reset(env_ids)`: `mujoco_warp.reset_data` with a per-world mask (the model's defaults, as
  `mj_resetData`), then zeroes `xpos`/`cfrc_ext` of those worlds as `mj_resetData` does;
  computes nothing.
- `forward(env_ids)`: `mujoco_warp.forward` runs on every world (it has no mask); it writes
  derived fields only, never the state, so the other worlds are unaffected.
- `state()` / `load_state(tensor)` / `copy_state`: `mujoco_warp.get_state` / `set_state` with
  `mjSTATE_INTEGRATION`, the layout of `mj_getState` and of `BatchEngine.state()` (float32
  here). `state()` is a snapshot, not a live view: restore with `load_state`.
- `cfrc_ext` is computed (by `rne_postconstraint`, in `forward` and in every step) only when
  the model has a force/torque/accelerometer-type sensor, as in C MuJoCo: see
  `engine.with_contact_forces`.

Warp launches go to torch's current CUDA stream, so they are ordered with the torch ops that
read and write the views. The engine also runs on Warp's CPU device (for tests); there
graph capture is off by default (`graph=True` turns on Warp's CPU graph replay).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

from rlcore.envs.mujoco_batch.engine import Engine
from rlcore.envs.mujoco_batch.ops import TorchOps

_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)


def _quiet_warp() -> None:
    """Keep Warp's "Module ... load on device" lines (one per kernel, hundreds per run) out
    of the stage's log: they are info, under Warp's default threshold (`config.log_level`,
    `LOG_INFO`); a threshold the user lowered for detail (`LOG_DEBUG`) is kept."""
    if wp.config.log_level == wp.LOG_INFO:
        wp.config.log_level = wp.LOG_WARNING


class WarpEngine(Engine):
    """N worlds of one model in MuJoCo Warp, on a CUDA device (or Warp's CPU device)."""

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        device: torch.device,
        *,
        nconmax: int | None = None,
        njmax: int | None = None,
        graph: bool | None = None,
        deterministic: bool = False,
    ) -> None:
        """`nconmax`/`njmax`: contacts/constraints per world (MuJoCo Warp's defaults if None;
        raise them if it prints overflow warnings). `graph`: capture `step` loops in graphs
        (default: on CUDA when conditional graph nodes are supported). `deterministic`:
        MuJoCo Warp's `DeterminismType.ALL` (sorted constraint rows, fixed-order
        reductions; costs speed). On CUDA, contact order follows atomics either way (the
        contact sort of `mujoco_warp` 4.0 does nothing), so equal worlds (`copy_state`),
        reruns and state round trips agree to float32 round-off, not bit for bit: on an
        H200, an Ant round trip in deterministic mode was not bit-identical."""
        device = _engine_device(device)
        _quiet_warp()
        wp.init()
        self.model = model
        self.num_envs = num_envs
        self.device = device
        # On Warp's CPU device kernels run in a fixed order; on CUDA, contacts follow atomics.
        self.bit_reproducible = device.type == "cpu"
        self.wp_device = wp.device_from_torch(device)
        self._streams: dict[int, wp.Stream] = {}
        with self._scope():
            self.wp_model = mjw.put_model(model)
            self.wp_data = mjw.make_data(model, nworld=num_envs, nconmax=nconmax, njmax=njmax)
            if deterministic:
                self.wp_model.opt.deterministic = mjw.DeterminismType.ALL
            self._mask = wp.zeros(num_envs, dtype=bool)
            self._all = wp.ones(num_envs, dtype=bool)
            nstate = mujoco.mj_stateSize(model, _INTEGRATION)
            self._state_wp = wp.zeros((num_envs, nstate), dtype=wp.float32)
            mjw.reset_data(self.wp_model, self.wp_data, reset=self._all)
        d = self.wp_data
        self.qpos = wp.to_torch(d.qpos)
        self.qvel = wp.to_torch(d.qvel)
        self.ctrl = wp.to_torch(d.ctrl)
        self.xpos = wp.to_torch(d.xpos)
        self.cfrc_ext = wp.to_torch(d.cfrc_ext)
        self._bind_arrays(TorchOps())
        self._mask_t = wp.to_torch(self._mask)
        self._state = wp.to_torch(self._state_wp)
        # Sleep state is not part of mjSTATE_INTEGRATION: `tree_asleep` is its source (the
        # other sleep arrays are derived from it in `forward`), so copy_state copies it too.
        self._sleep = bool(model.opt.enableflags & mujoco.mjtEnableBit.mjENBL_SLEEP)
        self._tree_asleep = wp.to_torch(d.tree_asleep) if self._sleep else None
        if graph is None:
            graph = device.type == "cuda" and wp.is_conditional_graph_supported()
        self.graph = graph
        self._graphs: dict[int, wp.Graph] = {}
        self._capture_stream = (
            wp.Stream(self.wp_device) if graph and device.type == "cuda" else None
        )

    # --- streams -------------------------------------------------------------------------

    def _stream(self) -> wp.Stream | None:
        """Torch's current stream on our device, as a Warp stream (None on CPU)."""
        if self.device.type != "cuda":
            return None
        torch_stream = torch.cuda.current_stream(self.device)
        stream = self._streams.get(torch_stream.cuda_stream)
        if stream is None:
            stream = self._streams[torch_stream.cuda_stream] = wp.stream_from_torch(torch_stream)
        return stream

    @contextlib.contextmanager
    def _scope(self) -> Iterator[None]:
        """Warp calls on our device, on torch's current stream (ordered with torch ops)."""
        with wp.ScopedDevice(self.wp_device), wp.ScopedStream(self._stream(), sync_enter=False):
            yield

    # --- Engine --------------------------------------------------------------------------

    def step(self, nstep: int) -> None:
        """Run `nstep` MuJoCo Warp steps, as one captured CUDA graph per `nstep` where
        graphs are on (one launch instead of a kernel launch per substep)."""
        if nstep <= 0:
            return
        if not self.graph:
            with self._scope():
                for _ in range(nstep):
                    mjw.step(self.wp_model, self.wp_data)
            return
        graph = self._graphs.get(nstep)
        if graph is None:
            graph = self._graphs[nstep] = self._capture(nstep)
        with self._scope():
            wp.capture_launch(graph, stream=self._stream())

    def _capture(self, nstep: int) -> wp.Graph:
        """The `nstep` loop as a graph (recorded, not run). CUDA cannot capture torch's
        default (legacy) stream, so capture uses a stream of its own; the graph is then
        launched on torch's current stream."""
        with (
            wp.ScopedDevice(self.wp_device),
            wp.ScopedStream(self._capture_stream, sync_enter=False),
            wp.ScopedCapture(device=self.wp_device) as capture,
        ):
            for _ in range(nstep):
                mjw.step(self.wp_model, self.wp_data)
        return capture.graph

    def reset(self, env_ids: torch.Tensor | None = None) -> None:
        """Reset the chosen worlds' data through a mask; their derived fields read zero."""
        with self._scope():
            if env_ids is None:
                mjw.reset_data(self.wp_model, self.wp_data, reset=self._all)
                self.xpos.zero_()
                self.cfrc_ext.zero_()
                return
            ids = env_ids.to(self.device, torch.int64)
            self._set_mask(ids)
            mjw.reset_data(self.wp_model, self.wp_data, reset=self._mask)
            self.xpos[ids] = 0.0
            self.cfrc_ext[ids] = 0.0

    def forward(self, env_ids: torch.Tensor | None = None) -> None:
        """Computes every world (MuJoCo Warp has no per-world forward); only derived fields
        change, so worlds outside `env_ids` keep their state and get the same values."""
        with self._scope():
            mjw.forward(self.wp_model, self.wp_data)

    def copy_state(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy integration state (and sleep state, if the model sleeps) from worlds `src`
        to `dst` on the device, then compute forward."""
        src = src.to(self.device, torch.int64)
        dst = dst.to(self.device, torch.int64)
        with self._scope():
            mjw.get_state(self.wp_model, self.wp_data, self._state_wp, _INTEGRATION, self._all)
            self._state[dst] = self._state[src]
            self._set_mask(dst)
            mjw.set_state(self.wp_model, self.wp_data, self._state_wp, _INTEGRATION, self._mask)
            if self._tree_asleep is not None:
                self._tree_asleep[dst] = self._tree_asleep[src]
            mjw.forward(self.wp_model, self.wp_data)

    def state(self) -> torch.Tensor:
        """The integration state (`mjSTATE_INTEGRATION` layout), [N, nstate] float32.

        A snapshot in a buffer that the next `state()`/`copy_state` overwrites: clone it to
        keep it, and restore it with `load_state` (writing into it changes nothing)."""
        with self._scope():
            mjw.get_state(self.wp_model, self.wp_data, self._state_wp, _INTEGRATION, self._all)
        return self._state

    def load_state(self, state: torch.Tensor) -> None:
        """Set every world's integration state from `state` ([N, nstate], as `state()`
        returns; any dtype/device), then `forward`. The sleep state, if the model sleeps,
        is not restored."""
        if tuple(state.shape) != tuple(self._state.shape):
            raise ValueError(
                f"state of shape {tuple(state.shape)}, expected {tuple(self._state.shape)}"
            )
        with self._scope():
            self._state.copy_(state)
            mjw.set_state(self.wp_model, self.wp_data, self._state_wp, _INTEGRATION, self._all)
            mjw.forward(self.wp_model, self.wp_data)

    def _set_mask(self, ids: torch.Tensor) -> None:
        self._mask_t.zero_()
        self._mask_t[ids] = True


__all__ = ["WarpEngine"]


def _engine_device(device: torch.device | str) -> torch.device:
    """`device` with its CUDA index made explicit (Warp needs one); cpu or cuda only."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"WarpEngine runs on cuda or cpu, not {device}")
    return device
