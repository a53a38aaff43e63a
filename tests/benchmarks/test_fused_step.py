"""benchmarks/fused_step.py's variants take the step eager PPO takes."""

import torch

from benchmarks.fused_step import build


def _flat(policy: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def _two_variants(task: str, first: str, second: str) -> tuple:
    """Minibatch indices and `(step, policy)` of each variant, built alike on CPU."""
    device = torch.device("cpu")
    idx = torch.randperm(256, generator=torch.Generator().manual_seed(0))[:64]
    return idx, build(task, first, 256, device), build(task, second, 256, device)


def test_compiled_whole_step_matches_eager_ppo_step() -> None:
    idx, (eager_step, eager_policy), (whole_step, whole_policy) = _two_variants(
        "cartpole", "eager", "step"
    )
    before = _flat(eager_policy)
    assert torch.equal(before, _flat(whole_policy))
    eager_step(idx)
    whole_step(idx)
    # One Adam step moves every parameter by about the rate; both moved them alike.
    assert (_flat(eager_policy) - before).abs().max() > 1e-4
    torch.testing.assert_close(_flat(whole_policy), _flat(eager_policy), atol=1e-6, rtol=0)


def test_the_bf16_variant_trains_in_bf16_and_moves_the_parameters_as_float32_does() -> None:
    idx, (exact_step, exact_policy), (mixed_step, mixed_policy) = _two_variants(
        "halfcheetah", "eager", "eager-bf16"
    )
    before = _flat(exact_policy)
    exact_step(idx)
    mixed_step(idx)
    exact, mixed = _flat(exact_policy) - before, _flat(mixed_policy) - before
    assert not torch.equal(mixed, exact)
    # Adam's first step is about lr x sign(gradient): where a gradient is near zero, bf16's
    # rounding flips its sign (0.5% of them here), so compare the whole step, not the worst.
    assert (mixed - exact).norm() < 0.25 * exact.norm()
