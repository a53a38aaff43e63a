import math

import pytest
import torch

from rlcore.algos.base import NonFiniteError
from rlcore.finite import (
    checked_outputs,
    nonfinite_flags,
    raise_if_env_nonfinite,
    raise_if_loss_nonfinite,
)
from rlcore.observations import ObsEntry
from rlcore.rollout import OBS, REWARD, RolloutSpec, make_rollout


def camera_rollout():
    spec = {"state": ObsEntry((3,), torch.float32), "camera": ObsEntry((3, 4, 4), torch.uint8)}
    return make_rollout(RolloutSpec(2, 3, spec, (), torch.int64, True, False, torch.device("cpu")))


def test_only_floating_point_outputs_are_checked():
    names = [name for name, _ in checked_outputs(camera_rollout())]
    assert names == [f"{OBS}/state", REWARD]  # uint8 camera frames cannot hold a NaN


def test_the_error_names_the_output_and_the_iteration():
    rollout = camera_rollout()
    assert nonfinite_flags(rollout).tolist() == [False, False]
    raise_if_env_nonfinite(rollout, nonfinite_flags(rollout), 5)  # all finite: no error
    rollout[REWARD][1, 2] = math.inf
    assert nonfinite_flags(rollout).tolist() == [False, True]
    with pytest.raises(NonFiniteError, match=r"non-finite reward in iteration 5"):
        raise_if_env_nonfinite(rollout, nonfinite_flags(rollout), 5)


def test_the_padded_step_is_not_an_env_output():
    rollout = camera_rollout()
    rollout[REWARD][:, -1] = math.nan  # index T holds no transition
    assert nonfinite_flags(rollout).tolist() == [False, False]


def test_a_non_finite_loss_stops_with_every_loss_named():
    raise_if_loss_nonfinite("ppo", {"loss/policy": 0.5, "train/episodes": math.nan}, 3)
    with pytest.raises(NonFiniteError, match=r"PPO loss .* iteration 3 \(policy=0.5, value=nan\)"):
        raise_if_loss_nonfinite("ppo", {"loss/policy": 0.5, "loss/value": math.nan}, 3)
