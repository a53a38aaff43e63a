"""One contract suite, run over every builtin env; through the Gymnasium bridge, over
Gymnasium's CartPole-v1 (in both auto-reset modes) and Pendulum-v1 and a Dict-observation
env; over the native batched MuJoCo tasks; over a frame-stacked camera env; and on CUDA when
present."""

from collections.abc import Callable

import gymnasium.spaces as spaces
import pytest
import torch
from tensordict import TensorDict

from rlcore.envs import ENVS, BatchedEnv, FrameStack, PushCubePixels, StepSlot, TorchEnv
from rlcore.envs.gym_bridge import GymnasiumEnv
from rlcore.observations import FLAT_KEY, allocate
from tests.rlcore.envs.gym_test_envs import register

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
N = 8
BRIDGED = {  # name: (Gymnasium id, bridge options)
    "CartPole-v1": ("CartPole-v1", {}),  # next-step, Gymnasium's default
    "CartPole-v1, same-step": ("CartPole-v1", {"autoreset": "same-step"}),
    "Pendulum-v1": ("Pendulum-v1", {}),
    "rlcore-test/DictPoint-v0": ("rlcore-test/DictPoint-v0", {}),
}
NATIVE_MUJOCO = {"mujoco:HalfCheetah": {}, "mujoco:Hopper": {}, "mujoco:Ant": {}}
STACKED = "push_cube_pixels, 3 frames stacked"
if torch.cuda.is_available():  # Warp's deterministic mode (DeterminismType.ALL) too
    NATIVE_MUJOCO["mujoco:Ant, deterministic"] = {"deterministic": True}
register()


# Which envs each test applies to, known before anything is built: a test that does not
# apply to an env is not generated for it (a skip would read as something missing).
CASES = (*sorted(ENVS), STACKED, *BRIDGED, *NATIVE_MUJOCO)
# Envs whose state can be read and restored: torch-simulated ones (rlcore's own and the
# native MuJoCo tasks), frame-stacked or not. A Gymnasium env's state cannot be saved (see
# rlcore.envs.gym_bridge).
WITH_STATE = (*sorted(ENVS), STACKED, *NATIVE_MUJOCO)
DISCRETE = ("cartpole", "CartPole-v1", "CartPole-v1, same-step")
WITH_BOX_ACTIONS = tuple(name for name in CASES if name not in DISCRETE)


def build_env(name: str, device: str, request: pytest.FixtureRequest) -> Callable[..., BatchedEnv]:
    def build(num_envs: int = N) -> BatchedEnv:
        if name in ENVS:
            return ENVS[name](num_envs, device=device)
        if name == STACKED:
            return FrameStack(PushCubePixels(num_envs, device=device, image_size=16), 3)
        if name in NATIVE_MUJOCO:
            from rlcore.envs.mujoco_batch import MujocoEnv, MujocoEnvError

            task = name.removeprefix("mujoco:").split(",")[0]
            options = NATIVE_MUJOCO[name]
            env = MujocoEnv(task, num_envs, device=device, nthread=1, **options)
            if request.node.name.startswith("test_render"):
                try:
                    env.render(size=8)
                except MujocoEnvError as exc:  # no EGL/OSMesa on this machine
                    pytest.skip(str(exc))
            return env
        env_id, options = BRIDGED[name]
        env = GymnasiumEnv(env_id, num_envs, device=device, **options)
        request.addfinalizer(env.close)
        return env

    return build


def cases(names: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(name, device) for name in names for device in DEVICES]


@pytest.fixture(params=cases(CASES), ids=str)
def make(request):
    return build_env(*request.param, request)


@pytest.fixture(params=cases(WITH_STATE), ids=str)
def make_with_state(request):
    return build_env(*request.param, request)


@pytest.fixture(params=cases(WITH_BOX_ACTIONS), ids=str)
def make_with_box_actions(request):
    return build_env(*request.param, request)


def test_the_applicability_tables_match_the_envs(make, request):
    """WITH_STATE and DISCRETE say what each env is: checked on the envs themselves, so a
    new env cannot silently drop out of the tests that apply to it."""
    name, _ = request.node.callspec.params["make"]
    env = make(1)
    inner = env.env if isinstance(env, FrameStack) else env
    assert isinstance(inner, TorchEnv) == (name in WITH_STATE)
    assert isinstance(env.action_space, spaces.Discrete) == (name in DISCRETE)


def random_actions(env: BatchedEnv, gen: torch.Generator) -> torch.Tensor:
    if isinstance(env.action_space, spaces.Discrete):
        return torch.randint(0, env.action_space.n, (env.num_envs,), generator=gen).to(env.device)
    low = torch.as_tensor(env.action_space.low)
    high = torch.as_tensor(env.action_space.high)
    u = torch.rand(env.num_envs, env.action_dim, generator=gen)
    return (low + u * (high - low)).to(env.device)


def flat(obs: TensorDict) -> torch.Tensor:
    """The `[N, obs_dim]` tensor of a flat env's observation (its one entry); for named
    entries, all of them flattened per instance and concatenated, as float."""
    if list(obs.keys()) == [FLAT_KEY]:
        return obs[FLAT_KEY]
    return torch.cat([value.reshape(obs.batch_size[0], -1).float() for value in obs.values()], 1)


def assert_fits_spec(obs: TensorDict, env: BatchedEnv) -> None:
    """`obs` is a TensorDict [N] whose entries are exactly `env.obs_spec`'s, on its device."""
    assert isinstance(obs, TensorDict) and obs.batch_size == (env.num_envs,)
    assert list(obs.keys()) == list(env.obs_spec)
    for key, entry in env.obs_spec.items():
        assert obs[key].shape == (env.num_envs, *entry.shape), key
        assert obs[key].dtype == entry.dtype, key
        assert obs[key].device.type == env.device.type, key


def slot_for(env: BatchedEnv) -> StepSlot:
    return StepSlot.allocate(env.num_envs, env.obs_spec, env.device, env.has_success)


def rollout(env: BatchedEnv, steps: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    slot, frames = slot_for(env), []
    for _ in range(steps):
        env.step(random_actions(env, gen), slot)
        frames.append(torch.cat([flat(slot.next_obs), slot.reward[:, None], slot.done[:, None]], 1))
    return frames


def test_shapes_dtypes_devices(make):
    env = make()
    obs = env.reset(seed=0)
    assert_fits_spec(obs, env)
    assert_fits_spec(env.final_obs, env)
    if list(env.obs_spec) == [FLAT_KEY]:
        assert flat(obs).shape == (N, env.obs_dim) and flat(obs).dtype == torch.float32
        assert env.observation_space.shape == (env.obs_dim,)
    assert flat(obs).device.type == env.device.type
    slot = slot_for(env)
    env.step(random_actions(env, torch.Generator().manual_seed(0)), slot)
    assert_fits_spec(env.final_obs, env)
    assert slot.reward.dtype == torch.float32 and torch.isfinite(slot.reward).all()
    for flag in (slot.terminated, slot.truncated, slot.done):
        assert flag.dtype == torch.bool and flag.shape == (N,)
    assert torch.isfinite(flat(slot.next_obs)).all()
    assert (slot.success is not None) == env.has_success


def test_step_writes_in_place_into_the_slot(make):
    env = make()
    env.reset(seed=0)
    storage = allocate(env.obs_spec, (N, 3), env.device)
    base = slot_for(env)
    next_obs = storage[:, 1]
    slot = StepSlot(base.reward, base.terminated, base.truncated, base.done, next_obs, base.success)
    entries = list(next_obs.values())
    pointers = [t.data_ptr() for t in (slot.reward, slot.done, *entries)]
    env.step(random_actions(env, torch.Generator().manual_seed(0)), slot)
    assert [t.data_ptr() for t in (slot.reward, slot.done, *next_obs.values())] == pointers
    for key, value in storage.items():
        assert value[:, 1].float().abs().sum() > 0 and value[:, 0].abs().sum() == 0, key


# Steps of a rollout that must agree to float32 round-off where an env is not bit-reproducible:
# contacts amplify round-off step by step (on an H200, two 40-step MuJoCo Warp Ant rollouts
# from one seed differed beyond 1e-4), so only the first steps are held to it.
ROUND_OFF_STEPS = 3


def same_trajectory(env: BatchedEnv, a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Equal as the env guarantees (`bit_reproducible`): bit for bit, or for the first
    `ROUND_OFF_STEPS` steps to float32 round-off (relative 1e-4)."""
    if env.bit_reproducible:
        return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    pairs = list(zip(a, b, strict=True))[:ROUND_OFF_STEPS]
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-4) for x, y in pairs)


def test_seeded_reset_is_deterministic(make):
    a, b, c = make(), make(), make()
    a.reset(seed=7), b.reset(seed=7), c.reset(seed=8)
    ra, rb, rc = rollout(a, 40, 0), rollout(b, 40, 0), rollout(c, 40, 0)
    assert same_trajectory(a, ra, rb)
    assert not same_trajectory(a, ra, rc)


def test_state_dict_round_trip_continues_identically(make_with_state):
    make = make_with_state
    a = make()
    a.reset(seed=1)
    rollout(a, 13, seed=0)
    snapshot = a.state_dict()
    expected = rollout(a, 30, seed=5)
    b = make()
    b.reset(seed=99)
    b.load_state_dict(snapshot)
    assert same_trajectory(a, expected, rollout(b, 30, seed=5))


def test_truncation_auto_reset_and_true_final_observation(make_with_state):
    make = make_with_state
    env, twin = make(), make()
    env.set_max_episode_steps(5)
    env.reset(seed=3)
    gen = torch.Generator().manual_seed(0)
    slot, twin_slot = slot_for(env), slot_for(twin)
    for step in range(5):
        action = random_actions(env, gen)
        if step == 4:  # the twin has no time limit: its next obs is the true final obs
            twin.load_state_dict(env.state_dict())
            twin.step(action, twin_slot)
        env.step(action, slot)
    ended = slot.truncated & ~slot.terminated
    assert ended.any()
    assert torch.equal(slot.done, slot.terminated | slot.truncated)
    assert (env.elapsed_steps[slot.done] == 0).all()
    torch.testing.assert_close(flat(env.final_obs)[ended], flat(twin_slot.next_obs)[ended])
    # after auto-reset, the obs at t+1 starts the new episode: it differs from the final one
    assert not torch.allclose(flat(slot.next_obs)[ended], flat(env.final_obs)[ended])


def test_partial_reset_touches_only_chosen_envs(make):
    env = make()
    env.reset(seed=0)
    rollout(env, 3, seed=0)
    before = flat(env.reset(env_ids=torch.tensor([], dtype=torch.long)))
    after = flat(env.reset(env_ids=torch.tensor([1, 3])))
    untouched = [i for i in range(N) if i not in (1, 3)]
    assert torch.equal(before[untouched], after[untouched])
    assert not torch.equal(before[[1, 3]], after[[1, 3]])
    if isinstance(env, TorchEnv):
        assert (env.elapsed_steps[[1, 3]] == 0).all()


def test_group_reset_shares_initial_state_within_groups(make):
    env = make()
    obs = flat(env.reset(seed=0, group_size=4))
    assert torch.equal(obs[0:4], obs[0].expand(4, -1))
    assert torch.equal(obs[4:8], obs[4].expand(4, -1))
    assert not torch.equal(obs[0], obs[4])
    with pytest.raises(ValueError, match="group_size"):
        env.reset(group_size=3)


def test_render_gives_rgb_frames(make):
    env = make()
    env.reset(seed=0)
    frames = env.render(torch.tensor([0, 2]), size=48)
    assert frames.shape == (2, 48, 48, 3) and frames.dtype == torch.uint8
    assert frames.device.type == env.device.type
    assert frames.float().std() > 0  # something was drawn


def test_box_actions_are_clipped_to_bounds(make_with_box_actions):
    env, twin = make_with_box_actions(), make_with_box_actions()
    env.reset(seed=0), twin.reset(seed=0)
    high = torch.as_tensor(env.action_space.high, device=env.device).expand(N, -1)
    a, b = slot_for(env), slot_for(twin)
    env.step(high * 100, a)
    twin.step(high.clone(), b)
    assert torch.equal(flat(a.next_obs), flat(b.next_obs)) and torch.equal(a.reward, b.reward)
