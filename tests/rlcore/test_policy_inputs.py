"""Policies over named observation entries: what each network reads, encoders, normalisers,
and one-line refusals of configurations that cannot work."""

import gymnasium.spaces as spaces
import pytest
import torch
from tensordict import TensorDict

from rlcore.config import PolicyConfig
from rlcore.encoders import ImageEncoder
from rlcore.errors import ConfigError
from rlcore.observations import ObsEntry
from rlcore.policies import Actor, ActorCritic, SquashedGaussianActor

BOX = spaces.Box(-1.0, 1.0, (2,))
SPEC = {
    "image": ObsEntry((3, 36, 36), torch.uint8),
    "proprio": ObsEntry((4,), torch.float32),
    "privileged": ObsEntry((12,), torch.float32, privileged=True),
}


def batch(n: int = 5, seed: int = 0) -> TensorDict:
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "image": torch.randint(0, 256, (n, 3, 36, 36), generator=gen, dtype=torch.uint8),
            "proprio": torch.randn(n, 4, generator=gen),
            "privileged": torch.randn(n, 12, generator=gen),
        },
        batch_size=[n],
    )


def test_by_default_the_actor_skips_privileged_entries_and_the_critic_reads_all():
    policy = ActorCritic(SPEC, BOX, PolicyConfig())
    assert policy.actor_keys == ("image", "proprio")
    assert policy.critic_keys == ("image", "proprio", "privileged")
    # An image becomes the encoder's features; vectors go in as they are.
    assert policy.actor_reader.out_dim == 256 + 4
    assert policy.critic_reader.out_dim == 256 + 4 + 12
    assert isinstance(policy.actor_reader.encoders["image"], ImageEncoder)
    out = policy.act(batch())
    assert out.action.shape == (5, 2) and out.value.shape == (5,)


def test_an_asymmetric_critic_is_one_line_and_reads_only_what_it_names():
    policy = ActorCritic(SPEC, BOX, PolicyConfig(critic_obs=("privileged",)))
    assert policy.critic_keys == ("privileged",) and not policy.critic_reader.encoders
    obs = batch()
    value = policy.value(obs)
    obs["image"].zero_()  # the critic never looks at the image...
    obs["proprio"].zero_()
    assert torch.equal(policy.value(obs), value)
    obs["privileged"].zero_()  # ...only at the privileged state
    assert not torch.equal(policy.value(obs), value)


def test_image_gradients_reach_the_encoder_and_sharing_it_shares_the_parameters():
    separate = ActorCritic(SPEC, BOX, PolicyConfig())
    shared = ActorCritic(SPEC, BOX, PolicyConfig(share_image_encoder=True))
    assert shared.critic_reader.encoders["image"] is shared.actor_reader.encoders["image"]
    encoder_params = sum(p.numel() for p in shared.actor_reader.encoders["image"].parameters())
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(separate) - count(shared) == encoder_params
    obs = batch()
    out = shared.evaluate(obs, torch.zeros(5, 2))
    (out.log_prob.sum() + out.value.sum()).backward()
    first_conv = shared.actor_reader.encoders["image"].convs[0]
    assert first_conv.weight.grad is not None and first_conv.weight.grad.abs().sum() > 0


def test_only_vector_entries_are_normalised_each_by_its_own_statistics():
    policy = ActorCritic(SPEC, BOX, PolicyConfig(normalize_obs=True))
    assert set(policy.obs_norm.keys()) == {"proprio", "privileged"}
    obs = batch(n=200)
    obs["proprio"] = obs["proprio"] * 5 + 3
    policy.inputs.merge(
        obs, lambda x: (float(x.shape[0]), x.double().mean(0), x.double().var(0, unbiased=False))
    )
    normalized = policy.normalize(obs)
    assert torch.equal(normalized["image"], obs["image"])  # uint8, untouched
    torch.testing.assert_close(normalized["proprio"].mean(0), torch.zeros(4), atol=1e-4, rtol=0)
    torch.testing.assert_close(normalized["proprio"].std(0), torch.ones(4), atol=1e-2, rtol=0)


def test_sac_critics_read_their_own_entries():
    vectors = {"proprio": SPEC["proprio"], "privileged": SPEC["privileged"]}
    actor = SquashedGaussianActor(vectors, BOX, PolicyConfig(critic_obs=("proprio", "privileged")))
    obs = batch()
    actor_x, critic_x = actor.features(obs)
    assert torch.equal(actor_x, obs["proprio"])
    assert torch.equal(critic_x, torch.cat([obs["proprio"], obs["privileged"]], 1))


SMALL_IMAGE = {"image": ObsEntry((3, 20, 20), torch.uint8)}
FLOAT_IMAGE = {"image": ObsEntry((3, 36, 36), torch.float32)}


@pytest.mark.parametrize(
    ("cfg", "spec", "message"),
    [
        (
            PolicyConfig(encoders={"image": "mlp"}),
            SPEC,
            r"policy\.encoders\.image: 'mlp' reads float vectors.*'nature' or 'drq'",
        ),
        (
            PolicyConfig(encoders={"proprio": "nature"}),
            SPEC,
            r"policy\.encoders\.proprio: 'nature' encodes images.*use 'mlp'",
        ),
        (
            PolicyConfig(actor_obs=("image", "camera")),
            SPEC,
            r"policy\.actor_obs names \['image', 'camera'\]; this env's observation entries "
            r"are image uint8",
        ),
        (PolicyConfig(critic_obs=("state",)), SPEC, r"policy\.critic_obs names \['state'\]"),
        (
            PolicyConfig(encoders={"image": "nature"}),
            SMALL_IMAGE,
            r"'image' is 3x20x20: encoder 'nature' needs images of at least 36x36",
        ),
        (
            PolicyConfig(aux_obs=("goal",)),
            SPEC,
            r"policy\.aux_obs names 'goal'; this env's observation entries are image uint8",
        ),
        (
            PolicyConfig(aux_obs=("image",)),
            SPEC,
            r"policy\.aux_obs: entry 'image' is uint8 \[3, 36, 36\]; the actor's image features "
            r"predict float vectors",
        ),
        (
            PolicyConfig(actor_obs=("proprio",), aux_obs=("privileged",)),
            SPEC,
            r"policy\.aux_obs: \['privileged'\] are predicted from the actor's image features, "
            r"and the actor reads no image",
        ),
        (
            PolicyConfig(),
            FLOAT_IMAGE,
            r"entry 'image' is float32 \[3, 36, 36\]: policies read float vectors \[D\] and "
            r"uint8 images",
        ),
    ],
)
def test_configurations_that_cannot_work_fail_with_one_line_naming_the_entry(cfg, spec, message):
    with pytest.raises(ConfigError, match=message) as info:
        ActorCritic(spec, BOX, cfg)
    assert "\n" not in str(info.value)


def test_small_images_get_the_encoder_whose_strides_fit_them():
    spec = {"image": ObsEntry((3, 16, 16), torch.uint8)}
    policy = Actor(spec, BOX, PolicyConfig())
    images = torch.zeros(2, 3, 16, 16, dtype=torch.uint8)
    assert policy.act(TensorDict({"image": images}, batch_size=[2])).action.shape == (2, 2)
    assert policy.actor_reader.encoders["image"].center == 0.5  # drq's


def test_aux_obs_is_the_error_of_predicting_the_entries_from_the_actors_image_features():
    """The auxiliary loss is the mean squared error of a linear head over the actor's image
    features against the named entries as normalised, and its gradient trains the actor's
    encoder (not the critic's)."""
    cfg = PolicyConfig(normalize_obs=True, image_features=8, aux_obs=("privileged",))
    policy = ActorCritic(SPEC, BOX, cfg)
    obs = batch(6)
    policy.inputs.merge(obs, lambda t: (t.shape[0], t.mean(0), t.var(0, unbiased=False)))
    out = policy.evaluate(obs, torch.zeros(6, 2))
    x = policy.normalize(obs)
    features = policy.actor_reader.encoders["image"](obs["image"])
    head = policy.aux_head
    expected = (features @ head.weight.T + head.bias - x["privileged"]).square().mean()
    assert torch.allclose(out.aux_loss, expected)
    assert x["privileged"].abs().max() < 3 and not torch.allclose(
        x["privileged"], obs["privileged"]
    )
    out.aux_loss.backward()
    assert policy.actor_reader.encoders["image"].convs[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in policy.critic_reader.parameters())
    assert "privileged" not in policy.actor_keys
    # Without aux_obs there is no head and no loss.
    plain = ActorCritic(SPEC, BOX, PolicyConfig(image_features=8))
    assert plain.aux_head is None and plain.evaluate(obs, torch.zeros(6, 2)).aux_loss is None


def test_sac_refuses_aux_obs_in_one_line():
    from rlcore.policies import squashed_gaussian_policy

    with pytest.raises(ConfigError, match=r"policy\.aux_obs \['privileged'\]: SAC's critics"):
        squashed_gaussian_policy(SPEC, BOX, PolicyConfig(aux_obs=("privileged",)), None)
