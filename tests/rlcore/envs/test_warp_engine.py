"""WarpEngine (MuJoCo Warp) on Warp's CPU device: trajectories against C MuJoCo, masked
reset, exact state copies and checkpoint round trips. The first run compiles MuJoCo Warp's
kernels for the CPU (about 20 s); later runs load them from Warp's kernel cache."""

from __future__ import annotations

import os
import warnings

import pytest

pytest.importorskip("mujoco_warp")

import gymnasium
import mujoco
import numpy as np
import torch
import warp as wp

from rlcore.envs.mujoco_batch.engine import with_contact_forces
from rlcore.envs.mujoco_batch.warp_engine import WarpEngine

wp.config.log_level = wp.LOG_WARNING  # no per-kernel module-load lines in the test log
CPU = torch.device("cpu")
N = 4
INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    """Gymnasium's half_cheetah with a force sensor, so that `cfrc_ext` is computed."""
    path = os.path.join(os.path.dirname(gymnasium.__file__), "envs/mujoco/assets/half_cheetah.xml")
    with warnings.catch_warnings():  # the asset's deprecated `settotalmass`
        warnings.simplefilter("ignore", UserWarning)
        spec = mujoco.MjSpec.from_file(path)
        return with_contact_forces(spec.compile(), spec)


def start(engine: WarpEngine, seed: int = 0) -> None:
    """Reset, then give every world its own random state and control, and forward."""
    m = engine.model
    rng = np.random.default_rng(seed)
    engine.reset()
    engine.qpos[:] = torch.from_numpy(m.qpos0 + rng.uniform(-0.1, 0.1, (N, m.nq)))
    engine.qvel[:] = torch.from_numpy(rng.normal(0.0, 0.1, (N, m.nv)))
    engine.ctrl[:] = torch.from_numpy(rng.uniform(-1.0, 1.0, (N, m.nu)))
    engine.forward()


def snapshot(engine: WarpEngine) -> dict[str, torch.Tensor]:
    return {
        "state": engine.state().clone(),
        "xpos": engine.xpos.clone(),
        "cfrc_ext": engine.cfrc_ext.clone(),
    }


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_trajectory_matches_c_mujoco(model: mujoco.MjModel, graph: bool) -> None:
    engine = WarpEngine(model, N, CPU, graph=graph)
    assert engine.qpos.shape == (N, model.nq) and engine.qvel.shape == (N, model.nv)
    assert engine.ctrl.shape == (N, model.nu)
    assert engine.xpos.shape == (N, model.nbody, 3)
    assert engine.cfrc_ext.shape == (N, model.nbody, 6)
    start(engine)
    datas = []
    for i in range(N):
        d = mujoco.MjData(model)
        d.qpos[:], d.qvel[:], d.ctrl[:] = (x[i].double().numpy() for x in (
            engine.qpos, engine.qvel, engine.ctrl))  # fmt: skip
        mujoco.mj_forward(model, d)
        datas.append(d)
    c_state = np.stack([_get_state(model, d) for d in datas])
    np.testing.assert_allclose(engine.state().numpy(), c_state, rtol=0, atol=1e-6)
    contact_force_seen = False
    for _ in range(20):  # 60 mj_steps: the cheetah falls onto the floor
        engine.step(3)
        for i, d in enumerate(datas):
            for _ in range(3):
                mujoco.mj_step(model, d)
            # Measured maximum errors: qpos 9e-7, qvel 3e-5 (|qvel| up to 6),
            # xpos 5e-7, cfrc_ext 4e-3 (|cfrc_ext| up to 90): float32 round-off.
            np.testing.assert_allclose(engine.qpos[i].numpy(), d.qpos, rtol=0, atol=1e-5)
            np.testing.assert_allclose(engine.qvel[i].numpy(), d.qvel, rtol=0, atol=2e-4)
            np.testing.assert_allclose(engine.xpos[i].numpy(), d.xpos, rtol=0, atol=1e-5)
            np.testing.assert_allclose(engine.cfrc_ext[i].numpy(), d.cfrc_ext, rtol=0, atol=2e-2)
            assert float(engine.state()[i, 0]) == pytest.approx(d.time, abs=1e-5)
            contact_force_seen |= bool(np.abs(d.cfrc_ext).max() > 1.0)
    assert contact_force_seen


def _get_state(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    state = np.empty(mujoco.mj_stateSize(model, INTEGRATION))
    mujoco.mj_getState(model, data, state, INTEGRATION)
    return state


def test_graph_replay_is_bit_identical_to_eager_steps(model: mujoco.MjModel) -> None:
    eager, graph = WarpEngine(model, N, CPU, graph=False), WarpEngine(model, N, CPU, graph=True)
    start(eager)
    start(graph)
    for nstep in (2, 3, 2):  # two graphs, one replayed
        eager.step(nstep)
        graph.step(nstep)
        assert torch.equal(eager.state(), graph.state())
        assert torch.equal(eager.cfrc_ext, graph.cfrc_ext)


def test_reset_restores_defaults_only_in_the_given_worlds(model: mujoco.MjModel) -> None:
    engine = WarpEngine(model, N, CPU)
    start(engine)
    engine.step(10)
    before = snapshot(engine)
    engine.reset(torch.tensor([1]))
    after = snapshot(engine)
    default = mujoco.MjData(model)
    np.testing.assert_array_equal(after["state"][1].numpy(), _get_state(model, default))
    assert not after["xpos"][1].any() and not after["cfrc_ext"][1].any()  # as mj_resetData
    for key in before:
        rest = [0, 2, 3]
        assert torch.equal(before[key][rest], after[key][rest]), key
    engine.forward()  # the reset world computes as a fresh MjData does
    mujoco.mj_forward(model, default)
    np.testing.assert_allclose(engine.xpos[1].numpy(), default.xpos, rtol=0, atol=1e-6)
    assert torch.equal(before["state"][[0, 2, 3]], engine.state()[[0, 2, 3]])


def test_copy_state_makes_bit_identical_worlds_that_stay_identical(
    model: mujoco.MjModel,
) -> None:
    engine = WarpEngine(model, N, CPU)
    start(engine)
    engine.step(12)  # in contact, warm-started solver: qacc_warmstart matters
    before = engine.state().clone()
    engine.copy_state(torch.tensor([0, 0]), torch.tensor([2, 3]))
    state = engine.state()
    assert torch.equal(state[2], before[0]) and torch.equal(state[3], before[0])
    assert torch.equal(state[[0, 1]], before[[0, 1]])  # src and the others untouched
    assert torch.equal(engine.xpos[2], engine.xpos[0])
    for _ in range(5):
        engine.step(4)
        state = engine.state()
        assert not torch.equal(state[0], before[0])
        for world in (2, 3):
            assert torch.equal(state[world], state[0])
            assert torch.equal(engine.xpos[world], engine.xpos[0])
            assert torch.equal(engine.cfrc_ext[world], engine.cfrc_ext[0])


def test_load_state_restores_a_checkpoint_exactly(model: mujoco.MjModel) -> None:
    engine = WarpEngine(model, N, CPU)
    start(engine)
    engine.step(8)
    saved = engine.state().clone()
    engine.step(10)
    expected = snapshot(engine)
    engine.step(7)
    engine.load_state(saved.double())  # a BatchEngine (float64) checkpoint loads too
    assert torch.equal(engine.state(), saved)
    engine.step(10)
    for key, value in snapshot(engine).items():
        assert torch.equal(value, expected[key]), key
    with pytest.raises(ValueError, match="shape"):
        engine.load_state(saved[:, :-1])


def test_native_env_on_warp_follows_the_batch_engine():
    """The same task, state and actions on both engines: float32 rounding apart, the same
    observations and rewards (Warp on its CPU device here; CUDA in the benchmarks)."""
    from rlcore.envs.base import StepSlot
    from rlcore.envs.mujoco_batch import MujocoEnv

    cpu = MujocoEnv("HalfCheetah", 4, nthread=1, engine="batch")
    warp = MujocoEnv("HalfCheetah", 4, engine="warp")
    assert cpu.steps_on_host and not warp.steps_on_host  # numpy steps vs Warp's own arrays
    cpu.reset(seed=0)
    warp.load_state_dict(cpu.state_dict())
    gen = torch.Generator().manual_seed(0)
    a = StepSlot.allocate(4, cpu.obs_spec, cpu.device, False)
    b = StepSlot.allocate(4, warp.obs_spec, warp.device, False)
    for _ in range(10):
        action = torch.rand(4, cpu.action_dim, generator=gen) * 2 - 1
        cpu.step(action, a)
        warp.step(action, b)
        # positions to float32 rounding; velocities (and the reward, a velocity) drift more
        # through the float32 contact solver (measured: <= 1e-2 after 10 random steps)
        got, want = b.next_obs["state"], a.next_obs["state"]
        torch.testing.assert_close(got[:, :8], want[:, :8], rtol=0, atol=2e-3)
        torch.testing.assert_close(got[:, 8:], want[:, 8:], rtol=0, atol=5e-2)
        torch.testing.assert_close(b.reward, a.reward, rtol=0, atol=5e-2)
    obs = warp.reset(seed=1, group_size=2)["state"]
    assert torch.equal(obs[1], obs[0]) and not torch.equal(obs[2], obs[0])
