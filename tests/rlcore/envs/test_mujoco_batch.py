"""The native batched MuJoCo tasks against Gymnasium's -v5 envs, and their own guarantees:
masked auto-reset, group state copies, errors that name the task or file."""

import dataclasses
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlcore.config import MUJOCO_TASKS
from rlcore.envs.base import StepSlot
from rlcore.envs.mujoco_batch import TASKS, MujocoEnv, MujocoEnvError
from rlcore.envs.mujoco_batch import env as env_module
from rlcore.envs.mujoco_batch.engine import BatchEngine
from rlcore.envs.mujoco_batch.ops import NumpyOps, TorchOps
from rlcore.envs.mujoco_batch.tasks import gymnasium_asset
from rlcore.observations import FLAT_KEY

N = 3
STEPS = 40


def flat(obs: TensorDict) -> torch.Tensor:
    """The `[N, obs_dim]` tensor of a flat env's observation (its one entry)."""
    return obs[FLAT_KEY]


def slot_for(env: MujocoEnv) -> StepSlot:
    return StepSlot.allocate(env.num_envs, env.obs_spec, env.device, False)


def test_config_names_every_task():
    assert set(MUJOCO_TASKS) == set(TASKS)


@pytest.mark.parametrize("task", MUJOCO_TASKS)
def test_trajectories_match_gymnasium_v5_from_the_same_state_and_actions(task):
    env = MujocoEnv(task, N, nthread=1)
    obs = flat(env.reset(seed=0))
    start_qpos, start_qvel = env.engine.qpos.numpy().copy(), env.engine.qvel.numpy().copy()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(STEPS, N, env.action_dim)).astype(np.float32)
    slot = slot_for(env)
    ours = []
    for t in range(STEPS):
        env.step(torch.from_numpy(actions[t]), slot)
        ours.append((flat(slot.next_obs).clone(), flat(env.final_obs).clone(),
                     slot.reward.clone(), slot.terminated.clone(), slot.done.clone()))  # fmt: skip
    nq = env.engine.model.nq
    checked, ended = 0, 0
    for i in range(N):
        gym_env = gymnasium.make(f"{task}-v5").unwrapped
        gym_env.reset(seed=0)
        gym_env.set_state(start_qpos[i], start_qvel[i])
        np.testing.assert_allclose(gym_env._get_obs(), obs[i].numpy(), rtol=1e-6, atol=1e-6)
        for t in range(STEPS):
            g_obs, g_reward, g_term, _, info = gym_env.step(actions[t, i])
            next_obs, final_obs, reward, terminated, done = (x[i] for x in ours[t])
            mine = (final_obs if done else next_obs).numpy()
            if task == "Ant":  # positions and velocities; contact forces differ (tasks.py)
                width = nq - 2 + env.engine.model.nv
                np.testing.assert_allclose(mine[:width], g_obs[:width], rtol=1e-5, atol=1e-5)
                contact_cost = 5e-4 * float(np.square(mine[width:]).sum())
                g_reward = g_reward - info["reward_contact"] - contact_cost
            else:
                np.testing.assert_allclose(mine, g_obs, rtol=1e-5, atol=1e-5)
            assert float(reward) == pytest.approx(g_reward, rel=1e-5, abs=1e-5)
            assert bool(terminated) == bool(g_term)
            checked += 1
            if done:
                ended += 1
                break
        gym_env.close()
    assert checked >= N * 5
    if task == "Hopper":  # random actions make it fall: terminations are compared too
        assert ended > 0, checked


def test_ant_contact_forces_match_gymnasium_where_both_sample_them_at_the_same_state(tmp_path):
    # Ant's MJCF integrates with RK4, and Gymnasium reads the contact forces after the step
    # (the last substep's fourth RK4 stage); the batch samples them at the substep's start
    # (tasks.py). With one-stage Euler both sample the same state: the whole observation
    # (contact forces included) and the whole reward (contact cost included) must match.
    xml = Path(gymnasium_asset("ant.xml")).read_text()
    assert 'integrator="RK4"' in xml
    euler = tmp_path / "ant_euler.xml"
    euler.write_text(xml.replace('integrator="RK4"', 'integrator="Euler"'))
    env = MujocoEnv("Ant", N, nthread=1, xml_file=str(euler))
    env.reset(seed=0)
    start_qpos, start_qvel = env.engine.qpos.numpy().copy(), env.engine.qvel.numpy().copy()
    actions = np.random.default_rng(0).uniform(-1, 1, size=(STEPS, N, env.action_dim))
    slot = slot_for(env)
    ours = []
    for t in range(STEPS):
        env.step(torch.from_numpy(actions[t]).float(), slot)
        ours.append((flat(slot.next_obs).clone(), flat(env.final_obs).clone(),
                     slot.reward.clone(), slot.done.clone()))  # fmt: skip
    width = env.engine.model.nq - 2 + env.engine.model.nv  # contact forces come after
    with_contacts = 0
    for i in range(N):
        gym_env = gymnasium.make("Ant-v5", xml_file=str(euler)).unwrapped
        gym_env.reset(seed=0)
        gym_env.set_state(start_qpos[i], start_qvel[i])
        for t in range(STEPS):
            g_obs, g_reward, *_ = gym_env.step(actions[t, i].astype(np.float32))
            next_obs, final_obs, reward, done = (x[i] for x in ours[t])
            mine = (final_obs if done else next_obs).numpy()
            np.testing.assert_allclose(mine, g_obs, rtol=1e-5, atol=1e-5)
            assert float(reward) == pytest.approx(g_reward, rel=1e-5, abs=1e-5)
            with_contacts += bool(np.abs(g_obs[width:]).max() > 0.01)
            if done:
                break
        gym_env.close()
    assert with_contacts >= 10  # the comparison covers real contact forces


@pytest.mark.parametrize("task", MUJOCO_TASKS)
def test_the_numpy_step_computes_what_the_torch_step_does(task, monkeypatch):
    """The CPU engine runs a task's step on numpy views; MuJoCo Warp on torch tensors. The
    same task code on the same engine, once per kind of array, over resets and terminations
    and out-of-range actions: the same numbers (rewards to summation-order rounding)."""
    n, steps = 8, 60
    host = MujocoEnv(task, n, nthread=1)
    monkeypatch.setattr(
        env_module, "make_engine", lambda model, n, *args: BatchEngine(model, n, ops=TorchOps())
    )
    device = MujocoEnv(task, n, nthread=1)
    assert isinstance(host.engine.ops, NumpyOps) and isinstance(device.engine.ops, TorchOps)
    assert torch.equal(flat(host.reset(seed=3)), flat(device.reset(seed=3)))
    host.set_max_episode_steps(25)  # truncations and their final observations too
    device.set_max_episode_steps(25)
    # The host env reads the collector's action column (its numpy view); the other a tensor.
    host_slot = dataclasses.replace(slot_for(host), action=torch.zeros(n, host.action_dim))
    device_slot = slot_for(device)
    gen, ended = torch.Generator().manual_seed(0), 0
    for _ in range(steps):
        action = torch.rand(n, host.action_dim, generator=gen) * 3 - 1.5  # beyond +-1 too
        host_slot.action.copy_(action)
        host.step(host_slot.action, host_slot)
        device.step(action, device_slot)
        assert torch.equal(flat(host_slot.next_obs), flat(device_slot.next_obs))
        for field in ("terminated", "truncated", "done"):
            assert torch.equal(getattr(host_slot, field), getattr(device_slot, field)), field
        torch.testing.assert_close(host_slot.reward, device_slot.reward, rtol=1e-6, atol=1e-6)
        assert torch.equal(flat(host.final_obs), flat(device.final_obs))
        assert torch.equal(host.engine.state(), device.engine.state())
        ended += int(host_slot.done.sum())
    assert torch.equal(host.engine.ctrl, device.engine.ctrl)
    assert host.engine.ctrl.abs().max() == 1.0  # the actions were clamped to the range
    assert ended >= n * 2


def test_auto_reset_touches_only_the_finished_instances():
    env, twin = MujocoEnv("Hopper", N, nthread=1), MujocoEnv("Hopper", N, nthread=1)
    env.reset(seed=1)
    twin.load_state_dict(env.state_dict())
    env.engine.qpos[1, 1] = 0.3  # instance 1 falls: unhealthy (z < 0.7) after the step
    twin.engine.qpos[1, 1] = 0.3
    action = torch.zeros(N, env.action_dim)
    slot = slot_for(env)
    twin.set_max_episode_steps(10_000)
    env.step(action, slot)
    twin.engine.step(twin.task.frame_skip)  # the twin's physics only, no auto-reset
    assert slot.terminated.tolist() == [False, True, False]
    # the finished instance restarted near qpos0; the others went on untouched
    qpos0 = torch.as_tensor(env.engine.model.qpos0)
    assert (env.engine.qpos[1] - qpos0).abs().max() <= 5e-3
    for i in (0, 2):
        assert torch.equal(env.engine.qpos[i], twin.engine.qpos[i])
        assert torch.equal(env.engine.qvel[i], twin.engine.qvel[i])
    assert flat(env.final_obs)[1, 0] == pytest.approx(float(twin.engine.qpos[1, 1]))  # final z
    assert env.elapsed_steps.tolist() == [1, 0, 1]


@pytest.mark.parametrize("task", MUJOCO_TASKS)
def test_group_reset_copies_whole_states_that_stay_identical(task):
    env = MujocoEnv(task, 6, nthread=2)
    env.reset(seed=0, group_size=3)
    state = env.engine.state()
    assert torch.equal(state[1], state[0]) and torch.equal(state[2], state[0])
    assert not torch.equal(state[3], state[0])
    gen = torch.Generator().manual_seed(0)
    slot = slot_for(env)
    for _ in range(10):  # the same action within each group
        a = (torch.rand(2, env.action_dim, generator=gen) * 2 - 1).repeat_interleave(3, 0)
        env.step(a, slot)
    state = env.engine.state()
    assert torch.equal(state[1], state[0]) and torch.equal(state[5], state[3])
    assert torch.equal(flat(slot.next_obs)[2], flat(slot.next_obs)[0])


def test_results_do_not_depend_on_the_thread_count():
    runs = []
    for nthread in (1, 2):
        env = MujocoEnv("Ant", 8, nthread=nthread)
        env.reset(seed=4)
        gen, slot, out = torch.Generator().manual_seed(0), slot_for(env), []
        for _ in range(20):
            env.step(torch.rand(8, env.action_dim, generator=gen) * 2 - 1, slot)
            out.append(torch.cat([flat(slot.next_obs), slot.reward[:, None]], 1))
        runs.append(torch.stack(out))
    assert torch.equal(runs[0], runs[1])


def test_bad_input_names_the_task_or_file(tmp_path):
    with pytest.raises(MujocoEnvError, match="unknown MuJoCo task 'Walker'"):
        MujocoEnv("Walker", 2)
    missing = tmp_path / "nope.xml"
    with pytest.raises(MujocoEnvError, match=r"nope\.xml"):
        MujocoEnv("Hopper", 2, xml_file=str(missing))
    cheetah = gymnasium_asset("half_cheetah.xml")
    with pytest.raises(MujocoEnvError, match=r"mujoco:Hopper: .*half_cheetah.xml has 6 actuators"):
        MujocoEnv("Hopper", 2, xml_file=cheetah)
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body></mujoco>")
    with pytest.raises(MujocoEnvError, match=r"broken\.xml"):
        MujocoEnv("Hopper", 2, xml_file=str(broken))
    env = MujocoEnv("Hopper", 2)
    with pytest.raises(ValueError, match=r"mujoco:Hopper: actions must have shape \[2, 3\]"):
        env.step(torch.zeros(2, 6), slot_for(env))


def test_make_env_builds_native_mujoco_from_config():
    from rlcore.config import EnvConfig
    from rlcore.envs import make_env

    options = {"nthread": 1, "deterministic": True}
    env = make_env(EnvConfig(name="mujoco:HalfCheetah", num_envs=2, options=options))
    assert isinstance(env, MujocoEnv) and env.obs_dim == 17 and env.action_dim == 6
    assert env.bit_reproducible  # mujoco.batch on CPU: always bit for bit
    with pytest.raises(ValueError, match="unknown MuJoCo task 'Cheetah'"):
        EnvConfig(name="mujoco:Cheetah")


def test_missing_extras_are_named(monkeypatch):
    import importlib
    import sys

    from rlcore.errors import MissingExtraError

    for name in [m for m in sys.modules if m.startswith("rlcore.envs.mujoco_batch")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mujoco", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'rlplatform\[mujoco\]'"):
        importlib.import_module("rlcore.envs.mujoco_batch")


def test_missing_warp_extra_is_named(monkeypatch):
    import sys

    from rlcore.envs.mujoco_batch.engine import make_engine
    from rlcore.errors import MissingExtraError

    monkeypatch.delitem(sys.modules, "rlcore.envs.mujoco_batch.warp_engine", raising=False)
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)
    env = MujocoEnv("Hopper", 1)
    with pytest.raises(MissingExtraError, match=r"rlplatform\[mujoco-warp\]"):
        make_engine(env.engine.model, 1, torch.device("cpu"), kind="warp")
