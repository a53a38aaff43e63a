import torch

from rlcore.algos.minibatch import iterate_minibatches
from rlcore.rollout import (
    ACTION,
    FINAL_VALUE,
    OBS,
    REWARD,
    VALUE,
    RolloutSpec,
    make_rollout,
    nominal_bytes,
    step_slots,
    transition_view,
)


def spec(**overrides):
    base = dict(
        num_envs=3,
        num_steps=4,
        obs_dim=2,
        action_shape=(),
        action_dtype=torch.int64,
        with_value=True,
        with_success=False,
        device=torch.device("cpu"),
    )
    return RolloutSpec(**(base | overrides))


def test_layout_and_critic_free_allocation():
    ro = make_rollout(spec())
    assert ro.batch_size == torch.Size([3, 5])
    assert ro[OBS].shape == (3, 5, 2) and ro[ACTION].dtype == torch.int64
    assert VALUE in ro and FINAL_VALUE in ro
    critic_free = make_rollout(spec(with_value=False))
    assert VALUE not in critic_free
    assert nominal_bytes(critic_free) < nominal_bytes(ro)


def test_transition_view_and_slots_are_views_into_the_storage():
    ro = make_rollout(spec())
    tv = transition_view(ro)
    assert tv.batch_size == torch.Size([3, 4])
    tv[REWARD][1, 2] = 7.0
    assert ro[REWARD][1, 2] == 7.0
    slots = step_slots(ro)
    slots[3].next_obs.fill_(5.0)  # transition t=3 writes its next obs at index T=4
    assert (ro[OBS][:, 4] == 5.0).all()
    assert slots[0].reward.data_ptr() == ro[REWARD][:, 0].data_ptr()


def test_minibatches_cover_every_transition_once_and_never_the_padding():
    ro = make_rollout(spec())
    ro[REWARD][:] = torch.arange(15.0).view(3, 5)  # index T (=4) holds 4, 9, 14
    gen = torch.Generator().manual_seed(0)
    seen = torch.cat(
        [b[REWARD] for b in iterate_minibatches(transition_view(ro), [REWARD], 5, gen)]
    )
    valid = sorted(v for v in range(15) if v % 5 != 4)
    assert sorted(seen.tolist()) == valid
