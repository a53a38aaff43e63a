"""The SB3 VecEnv adapter over rlcore's batched envs (benchmarks/sb3_vec_env.py): what SB3
sees is what the env produced, and SB3's PPO trains on it."""

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3", reason="the bench extra installs stable-baselines3")

from stable_baselines3.common.preprocessing import is_image_space, preprocess_obs

from benchmarks.sb3_vec_env import BatchedVecEnv, EncoderExtractor
from rlcore.config import PolicyConfig
from rlcore.encoders import ImageEncoder
from rlcore.envs import CartPole, PushCubePixels
from rlcore.envs.base import StepSlot

N, SIZE, HORIZON = 4, 16, 5
READS = ("image", "proprio")


def pixels() -> PushCubePixels:
    env = PushCubePixels(N, image_size=SIZE)
    env.set_max_episode_steps(HORIZON)  # episode ends within a few steps
    return env


def test_observations_rewards_and_episode_ends_are_the_envs_own():
    """The same env twice, same seed and actions: one stepped directly, one through the
    adapter. Observations (uint8 image, float32 proprio), rewards, dones and, at each
    episode's end, `terminal_observation` match the env's own `next_obs` / `final_obs`."""
    raw, venv = pixels(), BatchedVecEnv(pixels(), keys=READS, reward_scale=0.1)
    assert list(venv.observation_space.spaces) == list(READS)
    assert is_image_space(venv.observation_space["image"])
    slot = StepSlot.allocate(N, raw.obs_spec, raw.device, with_success=True)
    venv.seed(7)
    obs, expected = venv.reset(), raw.reset(seed=7)
    generator = torch.Generator().manual_seed(0)
    ends = 0
    for _ in range(2 * HORIZON + 1):
        assert set(obs) == set(READS)
        for key in READS:
            assert obs[key].dtype == venv.observation_space[key].dtype
            np.testing.assert_array_equal(obs[key], expected[key].numpy())
        assert obs["image"].dtype == np.uint8 and obs["image"].shape == (N, 3, SIZE, SIZE)
        action = torch.rand(N, 2, generator=generator) * 2 - 1
        obs, rewards, dones, infos = venv.step(action.numpy())
        raw.step(action, slot)
        expected = slot.next_obs
        assert rewards.dtype == np.float32
        np.testing.assert_allclose(rewards, 0.1 * slot.reward.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(dones, slot.done.numpy())
        for i in range(N):
            assert ("terminal_observation" in infos[i]) == bool(dones[i])
            if not dones[i]:
                continue
            ends += 1
            final = infos[i]["terminal_observation"]
            assert set(final) == set(READS)
            for key in READS:
                np.testing.assert_array_equal(final[key], raw.final_obs[key][i].numpy())
            truncated = bool(slot.truncated[i] and not slot.terminated[i])
            assert infos[i]["TimeLimit.truncated"] == truncated
            assert infos[i]["episode"]["l"] <= HORIZON
            assert isinstance(infos[i]["is_success"], bool)
    assert ends >= 2 * N
    # Copies: what SB3 keeps of the last step is not overwritten by the next one.
    kept = obs["image"].copy()
    venv.step(np.zeros((N, 2), np.float32))
    np.testing.assert_array_equal(obs["image"], kept)


def test_all_entries_by_default_and_flat_envs_as_one_array():
    assert list(BatchedVecEnv(pixels()).observation_space.spaces) == [
        "image",
        "privileged",
        "proprio",
    ]
    env = CartPole(3)
    venv = BatchedVecEnv(env)
    assert venv.observation_space == env.observation_space
    obs = venv.reset()
    assert isinstance(obs, np.ndarray) and obs.shape == (3, *env.observation_space.shape)
    obs, rewards, dones, _ = venv.step(np.array([0, 1, 1]))
    assert obs.shape == (3, *env.observation_space.shape) and rewards.shape == dones.shape == (3,)
    with pytest.raises(ValueError, match="keys"):
        BatchedVecEnv(pixels(), keys=("image", "nope"))


def test_extractor_is_our_encoder_on_sb3s_preprocessed_images():
    venv = BatchedVecEnv(pixels(), keys=READS)
    policy = PolicyConfig(encoders={"image": "spatial"}, image_features=8)
    extractor = EncoderExtractor(venv.observation_space, keys=READS, policy=policy)
    assert extractor.features_dim == 8 + 4
    obs = {key: torch.as_tensor(value) for key, value in venv.reset().items()}
    encoder = extractor.encoders["image"]
    assert isinstance(encoder, ImageEncoder)
    with torch.no_grad():
        got = extractor(preprocess_obs(obs, venv.observation_space))  # float images / 255
        want = torch.cat([encoder(obs["image"]), obs["proprio"]], dim=-1)  # uint8 images
    torch.testing.assert_close(got, want)


def test_sb3_ppo_multi_input_policy_learns_through_the_adapter():
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecCheckNan, VecNormalize

    venv = BatchedVecEnv(pixels(), keys=READS)
    venv = VecNormalize(VecCheckNan(venv, raise_exception=True), norm_reward=False,
                        norm_obs_keys=["proprio"])  # fmt: skip
    policy = PolicyConfig(encoders={"image": "spatial"}, image_features=8)
    model = PPO(
        "MultiInputPolicy", venv, n_steps=8, batch_size=16, n_epochs=1, device="cpu", seed=0,
        policy_kwargs={
            "net_arch": [16], "share_features_extractor": False,
            "features_extractor_class": EncoderExtractor,
            "features_extractor_kwargs": {"keys": READS, "policy": policy},
        },
    )  # fmt: skip
    model.learn(total_timesteps=2 * N * 8)
    assert model.num_timesteps == 2 * N * 8
    assert len(model.ep_info_buffer) >= N  # episodes of HORIZON steps ended and were logged
    action, _ = model.predict(venv.reset(), deterministic=True)
    assert action.shape == (N, 2)
