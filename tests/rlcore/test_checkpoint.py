"""Checkpoints of earlier releases keep loading after configuration fields are added."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from rlcore.checkpoint import (
    CheckpointError,
    _hash,
    config_hash,
    config_hashes,
    load_checkpoint,
    save_checkpoint,
)
from rlcore.config import EnvConfig, ExperimentConfig, TrainerConfig
from rlcore.presets import SAC_PRESETS
from rlcore.trained import load_trained_policy
from rlcore.trainer import Trainer

FRAME_STACK = {"env": ["frame_stack"], "policy": ["aux_obs", "aux_coef"]}
NAMED_ENTRIES = {
    "policy": ["actor_obs", "critic_obs", "encoders", "image_features", "share_image_encoder"],
    "algo": ["random_shift"],
}


def older_hash(cfg: ExperimentConfig, *releases: dict[str, list[str]]) -> str:
    """The hash a release without these fields wrote for `cfg`."""
    payload = asdict(cfg)
    for release in releases:
        for section, names in release.items():
            for name in names:
                payload[section].pop(name, None)
    return _hash(payload)


def test_this_release_hash_comes_first() -> None:
    cfg = ExperimentConfig()
    assert config_hashes(cfg)[0] == config_hash(cfg)


@pytest.mark.parametrize("cfg", [ExperimentConfig(), SAC_PRESETS["pendulum"]], ids=["ppo", "sac"])
def test_hashes_of_earlier_releases_are_accepted(cfg: ExperimentConfig) -> None:
    hashes = config_hashes(cfg)
    assert older_hash(cfg, FRAME_STACK) in hashes
    assert older_hash(cfg, FRAME_STACK, NAMED_ENTRIES) in hashes
    assert len(set(hashes)) == 3


def test_a_field_off_its_default_matches_no_earlier_release() -> None:
    base = ExperimentConfig(env=EnvConfig("push_cube_pixels"))
    stacked = dataclasses.replace(base, env=dataclasses.replace(base.env, frame_stack=2))
    assert config_hashes(stacked) == (config_hash(stacked),)
    # The older releases' hashes of the unstacked configuration are not the stacked one's.
    assert not set(config_hashes(base)) & set(config_hashes(stacked))
    wider = dataclasses.replace(base, policy=dataclasses.replace(base.policy, image_features=64))
    assert len(config_hashes(wider)) == 2  # this release's and the one before frame stacking


def test_a_policy_saved_by_an_earlier_release_loads(tmp_path: Path) -> None:
    cfg = ExperimentConfig(trainer=TrainerConfig(total_env_steps=64 * 16, num_steps=16))
    trainer = Trainer(cfg)
    trainer.run()
    path = tmp_path / "final.pt"
    trainer.save(path)
    state = load_checkpoint(path)
    state["config_hash"] = older_hash(cfg, FRAME_STACK, NAMED_ENTRIES)
    save_checkpoint(path, state)
    policy = load_trained_policy(cfg, path)
    for name, value in trainer.policy.state_dict().items():
        assert torch.equal(policy.state_dict()[name], value), name
    other = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, seed=1))
    with pytest.raises(CheckpointError, match="different configuration"):
        load_trained_policy(other, path)


def test_weights_that_do_not_fit_this_release_are_one_clear_error(tmp_path: Path) -> None:
    cfg = ExperimentConfig(trainer=TrainerConfig(total_env_steps=64 * 16, num_steps=16))
    trainer = Trainer(cfg)
    path = tmp_path / "final.pt"
    trainer.save(path)
    state = load_checkpoint(path)
    # As if written before the policy had this layer (an encoder's new parameter, say).
    del state["policy"]["actor.0.weight"]
    save_checkpoint(path, state)
    with pytest.raises(CheckpointError, match="does not fit this release's policy") as err:
        load_trained_policy(cfg, path)
    assert "\n" not in str(err.value)
