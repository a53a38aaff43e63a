import pytest
import torch

from rlcore.algos.minibatch import (
    RowSource,
    TransitionRows,
    epoch_minibatches,
    iterate_minibatches,
)
from rlcore.observations import FLAT_KEY, as_spec
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
        obs_spec=as_spec(2),
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
    assert ro[OBS, FLAT_KEY].shape == (3, 5, 2) and ro[ACTION].dtype == torch.int64
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
    slots[3].next_obs[FLAT_KEY].fill_(5.0)  # transition t=3 writes its next obs at index T=4
    assert (ro[OBS, FLAT_KEY][:, 4] == 5.0).all()
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


def test_one_minibatch_per_epoch_is_gathered_and_prepared_once():
    ro = make_rollout(spec())
    ro[REWARD][:] = torch.arange(15.0).view(3, 5)
    where = torch.ones(3, 4, dtype=torch.bool)
    where[1, 2] = False  # reward 7
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    prepared = []
    prepare = lambda batch: prepared.append(batch) or {REWARD: batch[REWARD] * 2}  # noqa: E731
    epochs = [
        list(batches)
        for batches in epoch_minibatches(transition_view(ro), [REWARD], 1, 3, gen, where, prepare)
    ]
    assert len(epochs) == 3 and all(len(batches) == 1 for batches in epochs)
    assert len(prepared) == 1  # gathered and prepared once, the same batch every epoch
    assert all(batches[0] is epochs[0][0] for batches in epochs)
    expected = [v for v in range(15) if v % 5 != 4 and v != 7]  # storage order, no shuffle
    assert (epochs[0][0][REWARD] == 2 * torch.tensor(expected, dtype=torch.float32)).all()
    assert torch.equal(gen.get_state(), state)  # the generator was not drawn from
    nothing = torch.zeros(3, 4, dtype=torch.bool)
    assert list(epoch_minibatches(transition_view(ro), [REWARD], 1, 3, gen, nothing)) == []


def test_several_minibatches_per_epoch_are_reshuffled_and_prepared_each():
    ro = make_rollout(spec())
    ro[REWARD][:] = torch.arange(15.0).view(3, 5)
    gen = torch.Generator().manual_seed(0)
    prepared = []
    prepare = lambda batch: prepared.append(batch) or batch  # noqa: E731
    epochs = [
        torch.cat([b[REWARD] for b in batches])
        for batches in epoch_minibatches(transition_view(ro), [REWARD], 3, 2, gen, None, prepare)
    ]
    valid = sorted(v for v in range(15) if v % 5 != 4)
    assert all(sorted(order.tolist()) == valid for order in epochs)
    assert not torch.equal(epochs[0], epochs[1])  # a fresh shuffle each epoch
    assert len(prepared) == 6


@pytest.mark.parametrize("layout", ["time-major", "env-major", "strided"])
def test_minibatch_rows_are_the_indexed_transitions_in_any_layout(layout):
    """`RowSource` gathers with `index_select` on a flat view where the storage has one,
    else indexes: the same rows as field[env, step] either way."""
    values = torch.arange(4 * 12 * 2, dtype=torch.float32)[: 4 * 6 * 2]
    if layout == "time-major":  # a rollout's storage: [T, N] in memory, viewed as [N, T]
        field = values.view(6, 4, 2).transpose(0, 1)
    elif layout == "env-major":
        field = values.view(4, 6, 2)
    else:
        field = torch.arange(4 * 12 * 2, dtype=torch.float32).view(4, 12, 2)[:, ::2]
    env_idx, step_idx = torch.tensor([3, 0, 2, 2, 1]), torch.tensor([5, 0, 1, 4, 3])
    source = RowSource(field)
    assert (source.flat is None) == (layout == "strided")
    rows = TransitionRows(env_idx * 6 + step_idx, num_envs=4, num_steps=6)
    assert torch.equal(source.take(rows), field[env_idx, step_idx])
