import gymnasium.spaces as spaces
import pytest
import torch
from torch.distributions import Categorical, Normal

from rlcore.policies import Actor, ActorCritic, PolicyConfig, RunningNorm, make_policy


def test_gaussian_log_prob_and_entropy_match_torch_distributions():
    torch.manual_seed(0)
    policy = ActorCritic(3, spaces.Box(-1, 1, (2,)), PolicyConfig(init_log_std=-0.3))
    obs = torch.randn(5, 3)
    out = policy.act(obs, torch.Generator().manual_seed(0))
    mean = policy.actor(obs)
    dist = Normal(mean, policy.log_std.exp())
    torch.testing.assert_close(out.log_prob, dist.log_prob(out.action).sum(-1))
    ev = policy.evaluate(obs, out.action)
    torch.testing.assert_close(ev.log_prob, out.log_prob)
    torch.testing.assert_close(ev.entropy, dist.entropy().sum(-1))
    torch.testing.assert_close(ev.value, policy.value(obs))


def test_categorical_sampling_log_prob_and_entropy():
    torch.manual_seed(0)
    policy = Actor(3, spaces.Discrete(3), PolicyConfig())
    with torch.no_grad():
        policy.actor[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
        policy.actor[-1].weight.zero_()
    obs = torch.randn(20_000, 3)
    out = policy.act(obs, torch.Generator().manual_seed(0))
    dist = Categorical(logits=torch.tensor([0.0, 1.0, 2.0]))
    freq = torch.bincount(out.action, minlength=3).double() / obs.shape[0]
    torch.testing.assert_close(freq, dist.probs.double(), atol=0.01, rtol=0)
    torch.testing.assert_close(out.log_prob, dist.log_prob(out.action))
    ev = policy.evaluate(obs[:4], out.action[:4])
    torch.testing.assert_close(ev.entropy, dist.entropy().expand(4))
    assert ev.value is None and out.value is None
    assert (policy.act_deterministic(obs[:4]) == 2).all()


def test_running_norm_matches_batch_statistics_and_is_saved():
    norm = RunningNorm(2)
    data = torch.randn(1000, 2) * torch.tensor([3.0, 0.5]) + torch.tensor([1.0, -2.0])
    for chunk in data.split(128):
        norm.update(chunk)
    torch.testing.assert_close(norm.mean.float(), data.mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(norm.var.float(), data.var(0, unbiased=False), atol=1e-4, rtol=0)
    policy = make_policy(2, spaces.Discrete(2), PolicyConfig(normalize_obs=True), True)
    policy.obs_norm["state"].update(data)
    restored = make_policy(2, spaces.Discrete(2), PolicyConfig(normalize_obs=True), True)
    restored.load_state_dict(policy.state_dict())
    torch.testing.assert_close(restored.obs_norm["state"].mean, policy.obs_norm["state"].mean)
    x = torch.randn(4, 2)
    torch.testing.assert_close(restored.normalize(x)["state"], policy.normalize(x)["state"])
    assert not torch.allclose(policy.normalize(x)["state"], x)  # evaluation sees normalised input


def test_a_checkpoint_from_before_named_entries_loads_its_one_normaliser():
    policy = make_policy(2, spaces.Discrete(2), PolicyConfig(normalize_obs=True), True)
    policy.obs_norm["state"].update(torch.randn(100, 2) * 3 + 1)
    old_layout = {
        key.replace("inputs.norms.state.", "obs_norm."): value
        for key, value in policy.state_dict().items()
    }
    assert "obs_norm.mean" in old_layout
    restored = make_policy(2, spaces.Discrete(2), PolicyConfig(normalize_obs=True), True)
    restored.load_state_dict(old_layout)
    x = torch.randn(4, 2)
    assert torch.equal(restored.act_deterministic(x), policy.act_deterministic(x))


def test_orthogonal_init_and_unsupported_spaces():
    policy = ActorCritic(4, spaces.Discrete(2), PolicyConfig(hidden_sizes=(64, 64)))
    w = policy.actor[0].weight
    # orthogonal rows scaled by gain sqrt(2): W W^T = 2 I for a 64x4 matrix's columns
    torch.testing.assert_close(w.T @ w, 2 * torch.eye(4), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="unsupported action space"):
        Actor(4, spaces.MultiDiscrete([2, 2]), PolicyConfig())


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_mlp_computes_what_its_sequential_modules_compute_to_the_bit(activation):
    torch.manual_seed(0)
    policy = ActorCritic(4, spaces.Discrete(3), PolicyConfig(activation=activation))
    obs = torch.randn(33, 4)
    for net in (policy.actor, policy.critic):
        as_modules = obs
        for module in net:  # each module's own forward, as nn.Sequential runs them
            as_modules = module(as_modules)
        assert torch.equal(net(obs), as_modules)
    assert list(policy.state_dict()) == [  # the keys checkpoints have always had
        "actor.0.weight", "actor.0.bias", "actor.2.weight", "actor.2.bias", "actor.4.weight",
        "actor.4.bias", "critic.0.weight", "critic.0.bias", "critic.2.weight",
        "critic.2.bias", "critic.4.weight", "critic.4.bias",
    ]  # fmt: skip


def test_compiled_relu_has_relus_values_and_gradients_zero_and_nan_included():
    from rlcore.policies import relu

    def square_of_relu(x):  # a backward that needs the forward's mask
        return relu(x).square().sum() + relu(x).sum()

    x = torch.tensor([-2.0, -0.0, 0.0, 1e-30, 3.0, -1e-30, float("nan")])
    values = {}
    for name, fn in (("eager", relu), ("compiled", torch.compile(relu))):
        values[name] = fn(x)
    torch.testing.assert_close(values["compiled"], torch.relu(x), equal_nan=True)
    torch.testing.assert_close(values["eager"], torch.relu(x), equal_nan=True)
    finite = x[:-1]
    grads = {}
    for name, fn in (("eager", square_of_relu), ("compiled", torch.compile(square_of_relu))):
        leaf = finite.clone().requires_grad_(True)
        fn(leaf).backward()
        grads[name] = leaf.grad
    reference = torch.tensor([0.0, 0.0, 0.0, 1.0, 7.0, 0.0])  # 2 relu(x) + 1 where x > 0
    assert torch.equal(grads["eager"], reference)
    assert torch.equal(grads["compiled"], reference)
