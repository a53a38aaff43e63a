import dataclasses

import pytest
import torch

from rlcore.algos.sac_config import SACConfig
from rlcore.config import (
    EnvConfig,
    ExperimentConfig,
    OfflineConfig,
    PolicyConfig,
    ReplayConfig,
    TrainerConfig,
)
from rlcore.datasets import DatasetError, save_dataset
from rlcore.envs import make_env
from rlcore.errors import ConfigError
from rlcore.policies import UniformRandomPolicy
from rlcore.presets import SAC_PRESETS
from rlcore.recording import record_transitions
from rlcore.trainer import Trainer
from tests.rlcore.resume import straight_and_resumed


def small_sac(env="pendulum", save_buffer=None, offline=None, **trainer):
    return ExperimentConfig(
        env=EnvConfig(env, num_envs=4),
        policy=PolicyConfig(hidden_sizes=(16, 16), activation="relu", normalize_obs=True),
        trainer=TrainerConfig(
            total_env_steps=4 * 8 * 10, num_steps=8, eval_every_iters=5, eval_episodes=2,
            **trainer,
        ),
        algorithm="sac",
        algo=SACConfig(lr=1e-3),
        replay=ReplayConfig(
            capacity=200, batch_size=32, warmup_steps=64, updates_per_step=0.5,
            save_in_checkpoint=save_buffer, offline=offline,
        ),
    )  # fmt: skip


def state(trainer):
    parts = [*trainer.policy.state_dict().values(), *trainer.algo.critic.state_dict().values()]
    parts += [*trainer.algo.critic_target.state_dict().values(), trainer.algo.log_alpha]
    return torch.cat([p.detach().flatten().double() for p in parts])


@pytest.mark.parametrize("env", ["pendulum", "push_cube"])
def test_interrupted_sac_resumes_bit_identically_buffer_included(tmp_path, env):
    cfg = small_sac(env)  # 10 iterations; the 200-slot buffer wraps after 7
    straight, resumed = straight_and_resumed(cfg, tmp_path / "ckpt.pt", stop_after_iters=6)
    # 0.5 per env step from the iteration that completes the 64 warm-up steps (the 2nd) on.
    assert straight.replay.updates == 9 * 16
    assert torch.equal(state(straight), state(resumed))
    obs = ("obs", "state")
    assert torch.equal(straight.replay.buffer.storage[obs], resumed.replay.buffer.storage[obs])


def test_without_the_buffer_in_the_checkpoint_a_resume_starts_empty(tmp_path, caplog):
    cfg = small_sac(save_buffer=False)
    Trainer(cfg).run(max_iters=4, checkpoint_path=tmp_path / "ckpt.pt")
    resumed = Trainer(cfg)
    resumed.load(tmp_path / "ckpt.pt")
    assert len(resumed.replay.buffer) == 0 and resumed.replay.env_steps == 4 * 32
    assert "without the replay buffer" in caplog.text


def test_a_warm_up_longer_than_the_run_says_it_never_learns(caplog):
    """A short smoke run with a preset's 10k warm-up trains nothing: said, not refused."""
    cfg = small_sac()
    long = dataclasses.replace(cfg, replay=dataclasses.replace(cfg.replay, warmup_steps=321))
    trainer = Trainer(long)
    assert "replay.warmup_steps (321) is more than the 320 env steps" in caplog.text
    trainer.run()
    assert trainer.replay.updates == 0
    caplog.clear()
    Trainer(dataclasses.replace(cfg, replay=dataclasses.replace(cfg.replay, warmup_steps=320)))
    assert "warmup_steps" not in caplog.text  # its last iteration learns


def test_sac_learns_pendulum_in_a_small_budget():
    # The preset's settings, cut at 4k env steps (~10 s on one CPU thread).
    cfg = SAC_PRESETS["pendulum"]
    cfg = dataclasses.replace(
        cfg, trainer=dataclasses.replace(cfg.trainer, total_env_steps=4_000, eval_every_iters=0)
    )
    result = Trainer(cfg).run()
    # A random policy scores about -1,200 on Pendulum; learning gets within -400.
    assert result.eval_metrics["eval/episode_return"] >= -400


def test_sac_on_a_discrete_env_is_refused_before_training():
    with pytest.raises(ConfigError, match="needs a continuous"):
        Trainer(small_sac("cartpole"))


def random_dataset(tmp_path, env_name="pendulum", steps=512):
    env = make_env(EnvConfig(env_name, num_envs=4))
    policy = UniformRandomPolicy(env.action_space)
    buffer, _ = record_transitions(env, policy, steps, seed=7)
    save_dataset(tmp_path / "data", buffer, source={"env": env_name})
    return str(tmp_path / "data")


def test_offline_only_training_takes_no_env_steps(tmp_path):
    path = random_dataset(tmp_path)
    logged = []
    trainer = Trainer(
        small_sac(offline=OfflineConfig(path, fraction=1.0)),
        sink=lambda steps, metrics: logged.append(steps),
    )
    before = state(trainer)
    result = trainer.run()
    assert result.env_steps == 0 and trainer.replay.env_steps == 0
    # The metrics' x axis still advances: 32 env steps' worth of updates per iteration.
    per_iteration = sorted(set(logged))
    assert per_iteration == [32 * k for k in range(1, 11)]
    assert len(trainer.replay.buffer) == 0  # nothing online was stored
    assert trainer.replay.updates == 10 * 16  # 0.5 x 32 per iteration, no warm-up
    assert not torch.equal(before, state(trainer))


def test_mixed_offline_and_online_batches_train(tmp_path):
    path = random_dataset(tmp_path)
    trainer = Trainer(small_sac(offline=OfflineConfig(path, fraction=0.5)))
    trainer.run()
    assert len(trainer.replay.buffer) == 200 and trainer.replay.updates > 0


def test_a_dataset_of_another_env_is_refused_naming_the_key(tmp_path):
    path = random_dataset(tmp_path, env_name="push_cube")  # obs of another size
    with pytest.raises(DatasetError, match=r"replay.offline.path: .*obs has shape"):
        Trainer(small_sac(offline=OfflineConfig(path, fraction=0.5)))
    with pytest.raises(DatasetError, match="does not exist"):
        Trainer(small_sac(offline=OfflineConfig(str(tmp_path / "missing"), fraction=0.5)))


def test_an_offline_dataset_for_an_on_policy_algorithm_is_refused(tmp_path):
    cfg = dataclasses.replace(
        small_sac(offline=OfflineConfig(random_dataset(tmp_path), 0.5)), algorithm="ppo", algo=None
    )
    with pytest.raises(ConfigError, match=r"replay\.offline feeds off-policy algorithms"):
        Trainer(cfg)


def test_sac_with_an_asymmetric_critic_resumes_bit_identically_images_stored_as_uint8(tmp_path):
    """The actor reads the pusher's own state, the critics the simulator's; the replay
    buffer keeps every entry, the camera's as uint8."""
    cfg = dataclasses.replace(
        small_sac(),
        env=EnvConfig("push_cube_pixels", num_envs=4, options={"image_size": 16}),
        policy=PolicyConfig(
            hidden_sizes=(16,), normalize_obs=True, actor_obs=("proprio",),
            critic_obs=("proprio", "privileged"),
        ),
    )  # fmt: skip
    straight, resumed = straight_and_resumed(cfg, tmp_path / "ckpt.pt", stop_after_iters=6)
    buffer = straight.replay.buffer
    assert buffer.storage["obs", "image"].dtype == buffer.finals["image"].dtype == torch.uint8
    assert buffer.storage["obs", "image"].any()
    assert straight.algo.critic.weights[0].shape[1] == 4 + 12 + 2  # proprio, privileged, action
    assert torch.equal(state(straight), state(resumed))
    mine, theirs = buffer.state_dict(), resumed.replay.buffer.state_dict()
    assert mine["storage"].keys() == theirs["storage"].keys()
    for name, column in mine["storage"].items():  # the ring and the kept-apart finals
        assert torch.equal(column, theirs["storage"][name]), name


def test_sac_from_stacked_frames_resumes_bit_identically_one_frame_a_row_stored(tmp_path):
    """SAC on 2 stacked 16x16 camera frames (DrQ-v2's encoder, by the size): the replay
    buffer stores the newest frame of each observation, rebuilds the stacks it samples, and
    is saved with the run, so a resumed run ends where the straight one does."""
    cfg = dataclasses.replace(
        small_sac(),
        env=EnvConfig("push_cube_pixels", num_envs=4, options={"image_size": 16}, frame_stack=2),
        policy=PolicyConfig(hidden_sizes=(16,), image_features=16),
    )
    straight, resumed = straight_and_resumed(cfg, tmp_path / "ckpt.pt", stop_after_iters=6)
    assert straight.env.obs_spec["image"].shape == (6, 16, 16)
    buffer = straight.replay.buffer
    assert buffer.storage["obs", "image"].shape[2:] == buffer.finals["image"].shape[1:]
    assert buffer.finals["image"].shape[1:] == (3, 16, 16)
    assert straight.replay.updates > 0
    assert torch.equal(state(straight), state(resumed))
    mine, theirs = buffer.state_dict(), resumed.replay.buffer.state_dict()
    for name, column in mine["storage"].items():
        assert torch.equal(column, theirs["storage"][name]), name
