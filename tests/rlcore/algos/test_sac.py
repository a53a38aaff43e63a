import math

import gymnasium.spaces as spaces
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlcore.algos.sac import SAC, TwinQ
from rlcore.algos.sac_config import SACConfig
from rlcore.config import PolicyConfig
from rlcore.errors import ConfigError
from rlcore.observations import ObsEntry
from rlcore.policies import SquashedGaussianActor
from rlcore.replay import NEXT_OBS
from rlcore.rollout import ACTION, OBS, REWARD, TERMINATED

BOX = spaces.Box(
    low=np.array([-2.0, 0.0], np.float32), high=np.array([2.0, 1.0], np.float32), dtype=np.float32
)


def make_sac(gamma=0.9, tau=0.005, seed=0, precision="float32", hidden=8, compile_update=False):
    torch.manual_seed(seed)
    policy = PolicyConfig(hidden_sizes=(hidden,), activation="relu")
    actor = SquashedGaussianActor(3, BOX, policy)
    cfg = SACConfig(gamma=gamma, tau=tau, precision=precision)
    gen = torch.Generator().manual_seed(seed)
    return SAC(actor, cfg, (hidden,), "relu", gen, compile_update=compile_update)


def random_batch(size=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            OBS: torch.randn(size, 3, generator=gen),
            ACTION: torch.rand(size, 2, generator=gen),
            REWARD: torch.randn(size, generator=gen),
            NEXT_OBS: torch.randn(size, 3, generator=gen),
            TERMINATED: torch.zeros(size, dtype=torch.bool),
        },
        batch_size=[size],
    )


def test_target_bootstraps_truncated_but_not_terminated_transitions(monkeypatch):
    sac = make_sac(gamma=0.9)
    # Fixed next-state log-probabilities and target Q values (two critics, two samples).
    next_log_prob = torch.tensor([-1.0, -2.0])
    monkeypatch.setattr(
        sac.actor,
        "sample_normalized",
        lambda x, g=None, noise=None: (torch.zeros(2, 2), next_log_prob),
    )
    monkeypatch.setattr(sac, "critic_target", lambda x, a: torch.tensor([[2.0, 4.0], [3.0, 5.0]]))
    batch = TensorDict(
        {
            NEXT_OBS: torch.zeros(2, 3),
            REWARD: torch.tensor([1.0, 0.5]),
            # Transition 0 terminated; transition 1 was cut by the time limit (truncated).
            TERMINATED: torch.tensor([True, False]),
        },
        batch_size=[2],
    )
    target = sac.critic_target_value(batch, alpha=torch.tensor(0.2))
    # 0: r only = 1.0.  1: min(4, 5) - 0.2 * (-2) = 4.4; 0.5 + 0.9 * 4.4 = 4.46.
    torch.testing.assert_close(target, torch.tensor([1.0, 4.46]))


def test_squashed_log_prob_matches_a_numerical_change_of_variables():
    torch.manual_seed(1)
    actor = SquashedGaussianActor(3, BOX, PolicyConfig(hidden_sizes=(8,))).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    squashed, log_prob = actor.sample_normalized(x, torch.Generator().manual_seed(2))
    mean, log_std = actor._mean_log_std(x)
    u = torch.atanh(squashed)
    gaussian = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1)
    # d tanh(u) / du by central differences: the density of a = tanh(u) is p(u) / |da/du|.
    h = 1e-6
    slope = (torch.tanh(u + h) - torch.tanh(u - h)) / (2 * h)
    reference = gaussian - slope.log().sum(-1)
    torch.testing.assert_close(log_prob, reference, rtol=1e-6, atol=1e-6)


def test_actions_lie_in_the_box_and_map_back_onto_the_unit_cube():
    actor = SquashedGaussianActor(3, BOX, PolicyConfig(hidden_sizes=(8,)))
    out = actor.act(torch.randn(1000, 3) * 10, torch.Generator().manual_seed(0))
    low, high = torch.as_tensor(BOX.low), torch.as_tensor(BOX.high)
    assert ((out.action >= low) & (out.action <= high)).all()
    unit = actor.from_env(out.action)
    assert unit.abs().max() <= 1.0 + 1e-6
    torch.testing.assert_close(actor.to_env(unit), out.action)


def test_target_networks_move_by_exactly_tau():
    sac = make_sac(tau=0.25)
    with torch.no_grad():
        for target in sac.critic_target.parameters():
            target.fill_(1.0)
        for online in sac.critic.parameters():
            online.fill_(3.0)
    sac.update_targets()
    for target in sac.critic_target.parameters():
        # 1 + 0.25 * (3 - 1) = 1.5
        assert torch.equal(target, torch.full_like(target, 1.5))


def test_twin_critics_are_independent_networks():
    critic = TwinQ(3, 2, (8, 8), "relu")
    q = critic(torch.randn(4, 3), torch.randn(4, 2))
    assert q.shape == (2, 4) and not torch.equal(q[0], q[1])


def test_one_update_moves_actor_critic_and_temperature_and_reports_fixed_names():
    sac = make_sac()
    batch = TensorDict(
        {
            OBS: torch.randn(16, 3),
            ACTION: torch.rand(16, 2),
            REWARD: torch.randn(16),
            NEXT_OBS: torch.randn(16, 3),
            TERMINATED: torch.zeros(16, dtype=torch.bool),
        },
        batch_size=[16],
    )
    before = [p.clone() for p in [*sac.actor.parameters(), *sac.critic.parameters()]]
    alpha = sac.log_alpha.item()
    stats = sac.update(batch)
    after = [*sac.actor.parameters(), *sac.critic.parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert sac.log_alpha.item() != alpha
    assert stats.shape == (len(SAC.metric_names),) and torch.isfinite(stats).all()
    assert SAC.metric_names == (
        "loss/critic", "loss/actor", "loss/alpha", "stats/alpha", "stats/q_mean", "stats/entropy"
    )  # fmt: skip
    assert stats[3].item() == pytest.approx(math.exp(0.0))  # alpha before the step


@pytest.mark.parametrize(
    "space", [spaces.Discrete(3), spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)]
)
def test_sac_refuses_action_spaces_it_cannot_squash(space):
    with pytest.raises(ConfigError, match=r"algorithm\.name 'sac'"):
        SAC.make_policy(3, space, PolicyConfig(), SACConfig())


def test_bf16_precision_keeps_weights_q_values_and_losses_in_float32():
    """Mixed precision changes the hidden layers' products only: the same update from the
    same weights gives float32 parameters and stats within bf16's ~3 digits of float32's."""
    exact, mixed = (
        make_sac(precision="float32", hidden=64),
        make_sac(precision="bfloat16", hidden=64),
    )
    batch = random_batch(size=64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q = mixed.critic(torch.randn(5, 3), torch.rand(5, 2))
        actions, log_prob = mixed.actor.sample_normalized(torch.randn(5, 3))
    assert q.dtype == actions.dtype == log_prob.dtype == torch.float32
    stats_exact, stats_mixed = exact.update(batch), mixed.update(batch)
    assert stats_mixed.dtype == torch.float32
    torch.testing.assert_close(stats_mixed, stats_exact, rtol=0.03, atol=0.03)
    for a, b in zip(exact.critic.parameters(), mixed.critic.parameters(), strict=True):
        assert b.dtype == torch.float32
        torch.testing.assert_close(b, a, rtol=0, atol=1e-3)  # one Adam step: lr 3e-4


def test_precision_must_be_float32_bfloat16_or_auto():
    with pytest.raises(ValueError, match=r"sac\.precision must be one of"):
        SACConfig(precision="float16")


@pytest.mark.parametrize(("flags", "mixed"), [({"avx512_bf16", "avx2"}, True), ({"avx2"}, False)])
def test_auto_precision_uses_bf16_where_the_cpu_multiplies_it_natively(monkeypatch, flags, mixed):
    import rlcore.precision

    monkeypatch.setattr(rlcore.precision, "_cpu_flags", lambda: frozenset(flags))
    assert rlcore.precision.native_bf16(torch.device("cpu")) is mixed
    assert make_sac(precision="auto")._mixed_precision is mixed
    assert rlcore.precision.native_bf16(torch.device("meta")) is False


PIXELS = {"image": ObsEntry((3, 16, 16), torch.uint8), "proprio": ObsEntry((4,), torch.float32)}


def pixel_batch(size=8, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def obs():
        image = torch.randint(0, 256, (size, 3, 16, 16), generator=gen, dtype=torch.uint8)
        return {"image": image, "proprio": torch.randn(size, 4, generator=gen)}

    return TensorDict(
        {
            OBS: obs(),
            ACTION: torch.rand(size, 2, generator=gen),
            REWARD: torch.randn(size, generator=gen),
            NEXT_OBS: obs(),
            TERMINATED: torch.zeros(size, dtype=torch.bool),
        },
        batch_size=[size],
    )


def make_pixel_sac(**cfg):
    torch.manual_seed(0)
    policy = PolicyConfig(hidden_sizes=(8,), activation="relu", image_features=8)
    actor = SquashedGaussianActor(PIXELS, BOX, policy)
    return SAC(actor, SACConfig(**cfg), (8,), "relu", torch.Generator().manual_seed(0))


def test_from_pixels_the_critics_train_the_one_image_encoder_the_actor_reads():
    sac = make_pixel_sac(critic_lr=1e-12)  # the critics' steps: ~1e-12 per parameter
    (encoder,) = sac.actor.image_encoders()
    assert sac.actor.critic_reader.encoders["image"] is encoder  # one encoder, shared
    before = [p.clone() for p in encoder.parameters()]
    actor_before = [p.clone() for p in sac.actor.actor.parameters()]
    sac.update(pixel_batch())
    moved = max(
        (p - b).abs().max().item() for p, b in zip(encoder.parameters(), before, strict=True)
    )
    assert 0 < moved < 1e-9  # the critics' tiny step; the actor's loss never reaches it
    assert all(
        not torch.equal(p, b)
        for p, b in zip(sac.actor.actor.parameters(), actor_before, strict=True)
    )


def test_random_shift_augments_images_only_and_keeps_them_uint8():
    batch = pixel_batch()
    assert make_pixel_sac()._augmented(batch[OBS]) is batch[OBS]
    shifted = make_pixel_sac(random_shift=2)._augmented(batch[OBS])
    assert shifted["image"].dtype == torch.uint8 and shifted["image"].shape == (8, 3, 16, 16)
    assert not torch.equal(shifted["image"], batch[OBS]["image"])
    assert torch.equal(shifted["proprio"], batch[OBS]["proprio"])
    assert torch.isfinite(make_pixel_sac(random_shift=2).update(pixel_batch())).all()


def sac_parameters(sac):
    params = [*sac.actor.parameters(), *sac.critic.parameters(), sac.log_alpha]
    return torch.cat([p.detach().flatten() for p in params])


def test_the_compiled_update_takes_the_eager_steps():
    def three_updates(compiled):
        sac = make_sac(seed=3, compile_update=compiled)
        stats = torch.stack([sac.update(random_batch(seed=i)) for i in range(3)])
        target = torch.cat([p.flatten() for p in sac.critic_target.parameters()])
        return sac_parameters(sac), target, stats

    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    eager, eager_target, eager_stats = three_updates(compiled=False)
    compiled, compiled_target, compiled_stats = three_updates(compiled=True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # really compiled
    assert not torch.allclose(sac_parameters(make_sac(seed=3)), eager)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(compiled_target, eager_target, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(compiled_stats, eager_stats, atol=1e-5, rtol=1e-4)


def test_the_compiled_bf16_update_is_one_function_that_takes_the_eager_bf16_steps():
    """`precision: bfloat16` compiled on CPU: the one function multiplies in bf16 as the
    eager update does (equal to float rounding), not in float32 (a step of Adam apart)."""

    def three_updates(precision, compiled):
        sac = make_sac(seed=3, precision=precision, hidden=64, compile_update=compiled)
        stats = torch.stack([sac.update(random_batch(size=64, seed=i)) for i in range(3)])
        return sac, sac_parameters(sac), stats

    sac, compiled, compiled_stats = three_updates("bfloat16", compiled=True)
    assert sac._one_function
    _, eager, eager_stats = three_updates("bfloat16", compiled=False)
    _, exact, exact_stats = three_updates("float32", compiled=False)
    torch.testing.assert_close(compiled, eager, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(compiled_stats, eager_stats, atol=1e-5, rtol=1e-4)
    assert (compiled - exact).abs().max() > 1e-4  # float32 products would have matched it
    assert (compiled_stats - exact_stats).abs().max() > 1e-4


def test_on_cpu_the_compiled_update_is_one_function_and_resumes_exactly():
    import copy

    sac = make_sac(seed=4, compile_update=True)
    assert sac._one_function  # flat observations, CPU
    for i in range(2):
        sac.update(random_batch(seed=i))
    saved = copy.deepcopy(sac.state_dict())
    saved_actor = copy.deepcopy(sac.actor.state_dict())
    saved_draws = sac.generator.get_state()  # the trainer's checkpoint holds it
    adam_state = saved["critic_optimizer"]["state"]
    assert float(adam_state[0]["step"]) == 2  # the device state, in torch Adam's format
    assert adam_state[0]["exp_avg"].abs().sum() > 0
    later = [sac.update(random_batch(seed=i)) for i in (2, 3)]

    resumed = make_sac(seed=9, compile_update=True)  # other initial weights, then loaded
    resumed.actor.load_state_dict(saved_actor)
    resumed.load_state_dict(saved)
    resumed.generator.set_state(saved_draws)
    again = [resumed.update(random_batch(seed=i)) for i in (2, 3)]
    assert torch.equal(sac_parameters(resumed), sac_parameters(sac))
    assert torch.equal(torch.stack(again), torch.stack(later))

    eager = make_sac(seed=9)  # a compiled run's checkpoint resumes eagerly too
    eager.actor.load_state_dict(saved_actor)
    eager.load_state_dict(saved)
    eager.generator.set_state(saved_draws)
    for i in (2, 3):
        eager.update(random_batch(seed=i))
    torch.testing.assert_close(sac_parameters(eager), sac_parameters(sac), atol=1e-5, rtol=1e-4)
