import copy

import gymnasium.spaces as spaces
import pytest
import torch

from rlcore.algos.sgd import FlatGradients, PolicyOptimizer, TensorGradients, fused_adam_step
from rlcore.policies import ActorCritic, PolicyConfig


def _policy() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(5, spaces.Box(-1, 1, (3,)), PolicyConfig(hidden_sizes=(16, 16)))


def _minibatches(count: int, size: int = 24) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(size, 5, generator=gen), torch.randn(size, 3, generator=gen),
         torch.randn(size, generator=gen))
        for _ in range(count)
    ]  # fmt: skip


def _loss(policy: ActorCritic, obs, action, advantage, rows: slice):
    out = policy.evaluate(obs[rows], action[rows])
    loss = -(out.log_prob * advantage[rows]).mean() + out.value.square().mean()
    return loss, loss.detach().reshape(1)


def _reference_step(policy, adam, batch, max_grad_norm):
    """The textbook step: fresh per-tensor gradients, clip_grad_norm_, Adam."""
    adam.zero_grad(set_to_none=True)
    loss, _ = _loss(policy, *batch, slice(None))
    loss.backward()
    parameters = list(policy.parameters())
    norm = torch.cat([p.grad.flatten() for p in parameters]).norm()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    adam.step()
    return norm


@pytest.mark.parametrize("max_grad_norm", [None, 0.05])
@pytest.mark.parametrize("chunk", [None, 24])
def test_steps_equal_per_tensor_gradients_and_clip_grad_norm_to_the_bit(max_grad_norm, chunk):
    policy = _policy()
    reference = copy.deepcopy(policy)
    ref_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, fused=True)
    optimizer = PolicyOptimizer(policy, 1e-2, 1e-5, "constant", 10)
    assert isinstance(optimizer.grads, FlatGradients)
    norms = []
    for batch in _minibatches(6):
        optimizer.step(24, chunk, lambda rows, b=batch: _loss(policy, *b, rows), max_grad_norm)
        norms.append(_reference_step(reference, ref_adam, batch, max_grad_norm))
    for ours, theirs in zip(policy.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    if max_grad_norm is not None:
        assert min(norms) > max_grad_norm  # the clipping was active on every step
    buffer = optimizer.grads.buffer
    for param in policy.parameters():  # the gradients are still views of the one buffer
        assert param.grad.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()


def test_gradients_dropped_or_replaced_between_steps_are_reattached():
    policy = _policy()
    reference = copy.deepcopy(policy)
    ref_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, fused=True)
    optimizer = PolicyOptimizer(policy, 1e-2, 1e-5, "constant", 10)
    for i, batch in enumerate(_minibatches(4)):
        if i == 1:
            policy.zero_grad(set_to_none=True)  # what `nn.Module.zero_grad` does by default
        if i == 2:
            for param in policy.parameters():
                param.grad = torch.full_like(param, 5.0)  # stale values: zeroed all the same
        optimizer.step(24, None, lambda rows, b=batch: _loss(policy, *b, rows), 0.05)
        _reference_step(reference, ref_adam, batch, 0.05)
    for ours, theirs in zip(policy.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    views = optimizer.grads.views
    assert all(p.grad is v for p, v in zip(policy.parameters(), views, strict=True))


def test_parameters_of_mixed_dtypes_keep_per_tensor_gradients():
    policy = _policy()
    policy.critic.double()  # one buffer cannot hold float32 and float64 gradients
    reference = copy.deepcopy(policy)
    ref_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, fused=True)
    optimizer = PolicyOptimizer(policy, 1e-2, 1e-5, "constant", 10)
    assert isinstance(optimizer.grads, TensorGradients)

    def loss(p, obs, action, advantage, rows):
        out = p.actor(obs[rows])
        value = p.critic(obs[rows].double()).squeeze(-1)
        total = -(out * action[rows]).sum(-1).mul(advantage[rows]).mean() + value.square().mean()
        return total, total.detach().float().reshape(1)

    for batch in _minibatches(3):
        optimizer.step(24, None, lambda rows, b=batch: loss(policy, *b, rows), 0.05)
        ref_adam.zero_grad(set_to_none=True)
        loss(reference, *batch, slice(None))[0].backward()
        torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 0.05)
        ref_adam.step()
    for ours, theirs in zip(policy.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_fused_steps_skip_optimizer_step_after_the_first_and_follow_rate_changes(monkeypatch):
    """`fused_adam_step` is torch Adam's kernels without `Optimizer.step`: bit-equal to it
    over steps with the rate changed between them, and `Optimizer.step` runs only to
    create the state on the first step."""
    policy = _policy()
    reference = copy.deepcopy(policy)
    ref_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, fused=True)
    optimizer = PolicyOptimizer(policy, 1e-2, 1e-5, "constant", 10)
    calls, adam_step = [], optimizer.adam.step
    monkeypatch.setattr(optimizer.adam, "step", lambda: calls.append(1) or adam_step())
    for i, batch in enumerate(_minibatches(5)):
        lr = 1e-2 / (i + 1)
        optimizer.set_lr(lr)
        for group in ref_adam.param_groups:
            group["lr"] = lr
        optimizer.step(24, None, lambda rows, b=batch: _loss(policy, *b, rows), 0.05)
        _reference_step(reference, ref_adam, batch, 0.05)
    assert calls == [1]
    for ours, theirs in zip(policy.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    steps = {float(state["step"]) for state in optimizer.adam.state.values()}
    assert steps == {5.0}


def test_fused_step_leaves_parameters_without_gradients_to_optimizer_step():
    """A parameter the loss never reached (no gradient) is skipped as torch skips it."""
    params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    adam = torch.optim.Adam(params, lr=0.1, fused=True)
    for _ in range(3):
        params[0].grad, params[1].grad = torch.ones(3), None
        fused_adam_step(adam)
    assert torch.equal(params[1], torch.ones(2)) and params[1] not in adam.state
    assert float(adam.state[params[0]]["step"]) == 3.0
    assert params[0][0] < 1.0
