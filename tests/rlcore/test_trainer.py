import dataclasses

import pytest
import torch

from rlcore.algos.base import NonFiniteError
from rlcore.algos.config import GRPOConfig
from rlcore.algos.ppo import PPOConfig
from rlcore.checkpoint import CheckpointError
from rlcore.config import EnvConfig, ExperimentConfig, PolicyConfig, TrainerConfig
from rlcore.errors import ConfigError
from rlcore.trainer import Trainer
from tests.rlcore.resume import straight_and_resumed


def small_config(env="pendulum", algorithm="ppo", **trainer):
    return ExperimentConfig(
        env=EnvConfig(env, num_envs=8),
        policy=PolicyConfig(hidden_sizes=(16, 16), normalize_obs=True),
        trainer=TrainerConfig(
            total_env_steps=2048, num_steps=32, eval_every_iters=2, eval_episodes=2, **trainer
        ),
        algorithm=algorithm,
        algo=PPOConfig(num_epochs=2, num_minibatches=2, lr_schedule="linear", ent_coef=0.01)
        if algorithm == "ppo"
        # Groups carried across rollouts: the resumed run must restore who waits for whom.
        else GRPOConfig(num_epochs=2, num_minibatches=2, kl_coef=0.1, reset_every_rollout=False),
    )


def params(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.policy.state_dict().values()])


@pytest.mark.parametrize(
    ("env", "algorithm"),
    [
        ("cartpole", "ppo"),
        ("pendulum", "ppo"),
        ("push_cube", "ppo"),
        ("cartpole", "grpo"),
        ("mujoco:Hopper", "ppo"),
        ("mujoco:Hopper", "grpo"),
    ],
)
def test_exact_resume_matches_straight_run(tmp_path, env, algorithm):
    cfg = small_config(env, algorithm)
    straight = Trainer(cfg)
    straight.run()
    assert straight.env_steps == 2048

    first = Trainer(cfg)
    first.run(max_iters=4, checkpoint_path=tmp_path / "ckpt.pt")
    assert first.env_steps == 1024
    resumed = Trainer(cfg)
    resumed.load(tmp_path / "ckpt.pt")
    resumed.run()
    assert torch.equal(params(straight), params(resumed))
    norms = straight.policy.obs_norm["state"], resumed.policy.obs_norm["state"]
    assert torch.equal(norms[0].mean, norms[1].mean)


def test_corrupt_or_truncated_checkpoint_fails_clearly(tmp_path):
    cfg = small_config()
    path = tmp_path / "ckpt.pt"
    Trainer(cfg).run(max_iters=1, checkpoint_path=path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated") as truncated:
        Trainer(cfg).load(path)
    assert "\n" not in str(truncated.value)  # torch's first line alone
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt or truncated") as garbage:
        Trainer(cfg).load(path)
    assert str(garbage.value) == (
        f"checkpoint {path} is corrupt or truncated and cannot be loaded (not a checkpoint "
        "file, or one holding objects a checkpoint never holds); delete it or restore a good "
        "copy"
    )


def test_checkpoint_from_other_config_is_refused(tmp_path):
    path = tmp_path / "ckpt.pt"
    Trainer(small_config()).run(max_iters=1, checkpoint_path=path)
    other = small_config(seed=5)
    with pytest.raises(CheckpointError, match="different configuration"):
        Trainer(other).load(path)


def test_non_finite_observation_stops_and_keeps_last_checkpoint(tmp_path):
    cfg = small_config(checkpoint_every_iters=1)
    path = tmp_path / "ckpt.pt"
    trainer = Trainer(cfg)
    trainer.run(max_iters=2, checkpoint_path=path)
    good = path.read_bytes()
    original = trainer.env._observe

    def poisoned(out):
        original(out)
        out[0, 0] = float("nan")

    trainer.env._observe = poisoned
    with pytest.raises(NonFiniteError, match="non-finite obs"):
        trainer.run(checkpoint_path=path)
    assert path.read_bytes() == good
    Trainer(cfg).load(path)  # still loadable


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: PPOConfig(gamma=1.5), r"ppo.gamma must be in \(0, 1\]"),
        (lambda: PPOConfig(gamma=0.0), "ppo.gamma"),
        (lambda: PPOConfig(lr_schedule="cosine"), "ppo.lr_schedule must be one of"),
        (lambda: EnvConfig(num_envs=0), "env.num_envs must be a positive integer"),
        (lambda: GRPOConfig(group_size=1), r"grpo.group_size must be an int >= 2, got 1"),
        (
            lambda: ExperimentConfig(EnvConfig(num_envs=10), algorithm="grpo"),
            r"grpo.group_size must divide env.num_envs \(10\), got 4",
        ),
        (lambda: ExperimentConfig(algorithm="a2c"), "choose one of .*'grpo', 'ppo', 'sac'"),
        (lambda: EnvConfig(name="atari"), "env.name must be one of .*cartpole"),
        (lambda: TrainerConfig(num_steps=0), "trainer.num_steps"),
        (lambda: PolicyConfig(activation="gelu"), "policy.activation must be one of"),
    ],
)
def test_invalid_configuration_names_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_success_target_on_an_env_without_success_is_refused():
    """CartPole reports no success, so the stop could never fire: say so, don't train on."""
    with pytest.raises(ConfigError, match=r"trainer.stop_at_eval_success: 'cartpole' reports"):
        Trainer(small_config("cartpole", stop_at_eval_success=0.9))
    assert Trainer(small_config("push_cube", stop_at_eval_success=0.9)).env.has_success


def test_non_finite_reward_stops_training(tmp_path):
    trainer = Trainer(small_config())
    original = trainer.env._advance

    def poisoned(action, slot):
        original(action, slot)
        slot.reward[1] = float("inf")

    trainer.env._advance = poisoned
    with pytest.raises(NonFiniteError, match="non-finite reward"):
        trainer.run(checkpoint_path=tmp_path / "ckpt.pt")
    assert not (tmp_path / "ckpt.pt").exists()


def test_non_finite_loss_stops_before_corrupting_parameters():
    trainer = Trainer(small_config())
    before = params(trainer).clone()
    original = trainer.policy.evaluate

    def poisoned(obs, action):
        out = original(obs, action)
        return out._replace(value=out.value * float("nan"))

    trainer.policy.evaluate = poisoned
    with pytest.raises(NonFiniteError, match="loss became non-finite"):
        trainer.run(max_iters=1)
    assert torch.equal(params(trainer), before)


@pytest.mark.parametrize("frame_stack", [1, 2])
def test_exact_resume_with_camera_observations(tmp_path, frame_stack):
    """uint8 images through the rollout, a CNN actor and a critic on privileged state; with
    stacked frames, the rollout holds each observation's stack as the env showed it."""
    env = EnvConfig(
        "push_cube_pixels", num_envs=4, options={"image_size": 16}, frame_stack=frame_stack
    )
    cfg = dataclasses.replace(
        small_config("push_cube_pixels"),
        env=env,
        policy=PolicyConfig(hidden_sizes=(16,), normalize_obs=True, image_features=16,
                            critic_obs=("privileged",)),
        trainer=TrainerConfig(total_env_steps=4 * 16 * 4, num_steps=16, eval_every_iters=2,
                              eval_episodes=2),
    )  # fmt: skip
    straight, resumed = straight_and_resumed(cfg, tmp_path / "ckpt.pt", stop_after_iters=2)
    image = ("obs", "image")
    assert straight.rollout[image].dtype == torch.uint8
    assert straight.rollout[image].shape == (4, 17, 3 * frame_stack, 16, 16)
    assert torch.equal(params(straight), params(resumed))
    assert torch.equal(straight.rollout[image], resumed.rollout[image])
    assert "eval/episode_return" in straight.last_eval  # the eval env stacks alike
    if frame_stack == 2:  # the older frame of each stack is the newest of the one before
        frames, done = straight.rollout[image].unflatten(2, (2, 3)), straight.rollout["done"]
        going_on = ~done[:, :-1]
        assert torch.equal(frames[:, 1:, 0][going_on], frames[:, :-1, 1][going_on])


def test_a_checkpoint_from_before_named_observations_is_refused_for_resuming(tmp_path):
    cfg = small_config()
    path = tmp_path / "ckpt.pt"
    Trainer(cfg).run(max_iters=1, checkpoint_path=path)
    state = torch.load(path, weights_only=True)
    del state["resume_format"]  # what every checkpoint before it looked like
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"resume format 1, this one reads 2\)"):
        Trainer(cfg).load(path)
