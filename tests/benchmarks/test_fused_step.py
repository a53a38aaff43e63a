"""benchmarks/fused_step.py's variants take the step eager PPO takes."""

import torch

from benchmarks.fused_step import build


def _flat(policy: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def test_compiled_whole_step_matches_eager_ppo_step() -> None:
    device = torch.device("cpu")
    idx = torch.randperm(256, generator=torch.Generator().manual_seed(0))[:64]
    eager_step, eager_policy = build("cartpole", "eager", 256, device)
    whole_step, whole_policy = build("cartpole", "step", 256, device)
    before = _flat(eager_policy)
    assert torch.equal(before, _flat(whole_policy))
    eager_step(idx)
    whole_step(idx)
    # One Adam step moves every parameter by about the rate; both moved them alike.
    assert (_flat(eager_policy) - before).abs().max() > 1e-4
    torch.testing.assert_close(_flat(whole_policy), _flat(eager_policy), atol=1e-6, rtol=0)


def test_the_bf16_variant_trains_in_bf16_and_moves_the_parameters_as_float32_does() -> None:
    device = torch.device("cpu")
    idx = torch.randperm(256, generator=torch.Generator().manual_seed(0))[:64]
    exact_step, exact_policy = build("halfcheetah", "eager", 256, device)
    mixed_step, mixed_policy = build("halfcheetah", "eager-bf16", 256, device)
    before = _flat(exact_policy)
    exact_step(idx)
    mixed_step(idx)
    exact, mixed = _flat(exact_policy) - before, _flat(mixed_policy) - before
    assert not torch.equal(mixed, exact)
    # Adam's first step is about lr x sign(gradient): where a gradient is near zero, bf16's
    # rounding flips its sign (0.5% of them here), so compare the whole step, not the worst.
    assert (mixed - exact).norm() < 0.25 * exact.norm()
